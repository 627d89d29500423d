import type { Queryable } from '../postgres/connect.js';
import { parseTag, type TransactionTag } from './tag.js';

/**
 * The wait-for graph of a cluster, joined from what each server says about its own waits.
 *
 * Each server answers one statement (WAIT_EDGES_SQL): every backend waiting for a lock (`pg_locks`, not granted),
 * each backend that blocks it (`pg_blocking_pids`: holders of a conflicting lock, and conflicting waiters queued
 * ahead of it), and the application_name of both (`pg_stat_activity`, which every role may read). Nothing here
 * needs a privilege or a server setting.
 *
 * The rule that joins the servers: a backend carrying a transaction's tag (tag.ts) is that transaction, on
 * whichever server it runs, so the transaction's sessions on several servers are one node. Any other backend (a
 * plain withShard, psql, another application) is a node of its own, `pid@server`. A blocker with pid 0 is a
 * prepared transaction (PostgreSQL's way of saying the lock has no session): a node `prepared@server` that waits
 * for nothing, so it has no edge out and can lie on no cycle.
 */
export const WAIT_EDGES_SQL = `SELECT w.pid AS waiter, wa.application_name AS waiter_name,
    b.pid AS blocker, ba.application_name AS blocker_name
  FROM (SELECT DISTINCT pid FROM pg_locks WHERE NOT granted AND pid IS NOT NULL) w
  CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS b(pid)
  LEFT JOIN pg_stat_activity wa ON wa.pid = w.pid
  LEFT JOIN pg_stat_activity ba ON ba.pid = b.pid`;

/**
 * Cancels the statement of every backend whose application_name is the tag `$1` (one transaction has one session
 * per server), in the statement that checks the tag: a backend whose transaction has ended carries another name
 * and is left alone (detector.ts says why that and the order of what is sent make the cancel safe).
 */
export const CANCEL_TAGGED_SQL = `SELECT count(*) FILTER (WHERE pg_cancel_backend(pid))::int AS cancelled
  FROM pg_stat_activity WHERE application_name = $1`;

/** One wait on one server, as WAIT_EDGES_SQL returns it. */
export interface WaitRow {
  waiter: number;
  waiter_name: string | null;
  blocker: number;
  blocker_name: string | null;
}

export async function readWaits(client: Queryable): Promise<WaitRow[]> {
  return (await client.query(WAIT_EDGES_SQL)).rows as WaitRow[];
}

/** A node of the graph: a transaction across shards (its tag), another session, or a prepared transaction. */
export interface WaitNode {
  readonly key: string;
  /** Set for a transaction across shards. */
  readonly tag?: TransactionTag;
}

/** `from` waits for `to` on `server`. */
export interface WaitEdge {
  readonly from: string;
  readonly to: string;
  readonly server: string;
}

export interface WaitGraph {
  readonly nodes: ReadonlyMap<string, WaitNode>;
  readonly edges: readonly WaitEdge[];
}

function nodeOf(server: string, pid: number, name: string | null): WaitNode {
  if (pid === 0) return { key: `prepared@${server}` };
  const tag = parseTag(name);
  return tag ? { key: `tx:${tag.txid}`, tag } : { key: `${pid}@${server}` };
}

/** The graph of every server's waits (server name → its rows), joined by the rule above. */
export function buildGraph(waits: ReadonlyMap<string, readonly WaitRow[]>): WaitGraph {
  const nodes = new Map<string, WaitNode>();
  const edges = new Map<string, WaitEdge>();
  for (const [server, rows] of waits) {
    // A backend appears in many rows (a queue on a hot row): its node is made once per reading.
    const seen = new Map<number, WaitNode>();
    const node = (pid: number, name: string | null) => {
      let n = seen.get(pid);
      if (!n) {
        n = nodeOf(server, pid, name);
        seen.set(pid, n);
      }
      return n;
    };
    for (const row of rows) {
      const from = node(Number(row.waiter), row.waiter_name);
      const to = node(Number(row.blocker), row.blocker_name);
      nodes.set(from.key, from);
      nodes.set(to.key, to);
      // A transaction's session waiting on its own other session cannot happen on one server (one session per
      // server per transaction); parallel workers report their leader, which is the same node.
      if (from.key === to.key) continue;
      const key = `${from.key}\n${to.key}\n${server}`;
      if (!edges.has(key)) edges.set(key, { from: from.key, to: to.key, server });
    }
  }
  return { nodes, edges: [...edges.values()] };
}

/**
 * The edges present in both graphs (two readings of the servers, one after the other). A deadlock's waits last
 * until one of its transactions is cancelled, so it is in both; a cycle that only appeared because the servers
 * were read at different moments (an edge that had ended on one server before another was read) rarely is.
 */
export function intersect(a: WaitGraph, b: WaitGraph): WaitGraph {
  const inB = new Set(b.edges.map((e) => `${e.from}\n${e.to}\n${e.server}`));
  const edges = a.edges.filter((e) => inB.has(`${e.from}\n${e.to}\n${e.server}`));
  const nodes = new Map<string, WaitNode>();
  for (const e of edges) {
    nodes.set(e.from, a.nodes.get(e.from) as WaitNode);
    nodes.set(e.to, a.nodes.get(e.to) as WaitNode);
  }
  return { nodes, edges };
}

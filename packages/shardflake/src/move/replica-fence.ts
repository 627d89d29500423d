import type pg from 'pg';
import { ShardflakeError } from '../errors/errors.js';
import { connect, describeUrl } from '../postgres/connect.js';
import { serverNodeUrls } from '../topology/connections.js';
import { lsnToBigint } from '../topology/lsn.js';
import { sleep } from './connections.js';
import { currentLsn } from './replication.js';
import type { Run } from './run.js';

/**
 * The fence must reach every node of the source before the catalog switches. The fence commits on the source's
 * primary; its streaming replicas get it when they replay that WAL. If the catalog switched first and the primary
 * died before a lagging replica replayed the fence, the promoted replica would hold an unfenced old copy while the
 * catalog places the shard on the target: two writable copies, and an acknowledged write on the old one that
 * `cluster cleanup` would later drop.
 *
 * So between the fence's commit and the switch (writes are paused on both copies then: the source is fenced, the
 * target not yet opened), the move reads the source primary's current WAL position, which is at or after the
 * fence's commit, and waits until every replica the config lists for the source has replayed up to it. The wait is
 * bounded (`replicaFenceTimeoutMs`); a replica that is down, not streaming or too slow makes the move fail, and a
 * failure before the switch rolls the move back (the source is unfenced and stays the shard's home) instead of
 * switching. An operator who knows a replica is gone for good declares it out (`skipReplicas`, CLI
 * `--skip-replica`); it then gets the fence on discovery (fence-strays.ts) if it is ever promoted.
 */
/** Connections to the source's replicas, opened before the pause so that waiting in it costs only the replay. */
export interface ReplicaChecks {
  nodes: { node: string; client: pg.Client | null; error: string | null }[];
  close(): Promise<void>;
}

/** A node as `--skip-replica` takes it and messages name it: `host:port` (no user, no password). */
function nodeHostPort(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || '5432'}`;
  } catch {
    return describeUrl(url);
  }
}

/** Opens a connection to every replica the config lists for the source (none for a server of one node). */
export async function openReplicaChecks(s: Run): Promise<ReplicaChecks> {
  const urls = serverNodeUrls(s.config, s.from);
  const skipped = new Set(s.opts.skipReplicas ?? []);
  const nodes: ReplicaChecks['nodes'] = [];
  if (urls.length > 1) {
    await Promise.all(
      urls.map(async (url) => {
        const node = describeUrl(url);
        const hostPort = nodeHostPort(url);
        if (skipped.has(hostPort) || skipped.has(node) || skipped.has(url)) return;
        const client = await connect(url, {
          connectTimeoutMs: Math.max(500, Math.min(5000, s.opts.replicaFenceTimeoutMs)),
          applicationName: 'shardflake move fence check',
        }).catch((error: unknown) => {
          nodes.push({ node: hostPort, client: null, error: (error as Error).message });
          return null;
        });
        if (client) nodes.push({ node: hostPort, client, error: null });
      }),
    );
  }
  return {
    nodes,
    close: () => Promise.all(nodes.map((n) => n.client?.end().catch(() => {}))).then(() => {}),
  };
}

/**
 * Waits until every node of `checks` that is a replica has replayed the source primary's WAL up to now (at or
 * after the fence's commit); throws MOVE_FAILED naming the replica past `replicaFenceTimeoutMs`.
 */
export async function waitFenceOnReplicas(
  s: Run,
  checks: ReplicaChecks,
): Promise<{ replicas: number; waitedMs: number }> {
  if (checks.nodes.length === 0) return { replicas: 0, waitedMs: 0 };
  const started = performance.now();
  const target = lsnToBigint(await currentLsn(s.source));
  const deadline = started + s.opts.replicaFenceTimeoutMs;
  const down = checks.nodes.find((c) => c.client === null);
  if (down) throw behind(s, down.node, `unreachable (${down.error})`);
  let waiting = checks.nodes;
  let replicas = 0;
  for (let round = 0; ; round++) {
    const next: typeof waiting = [];
    for (const c of waiting) {
      const { rows } = await (c.client as pg.Client).query(
        'SELECT pg_is_in_recovery() AS replica, pg_last_wal_replay_lsn()::text AS replayed',
      );
      const row = rows[0] as { replica: boolean; replayed: string | null };
      if (round === 0 && row.replica) replicas++;
      // The primary itself (whichever node it is now) has the fence: it committed there.
      if (!row.replica) continue;
      if (row.replayed === null || lsnToBigint(row.replayed) < target) next.push(c);
    }
    if (next.length === 0) break;
    if (performance.now() > deadline) {
      throw behind(
        s,
        next.map((c) => c.node).join(', '),
        `has not replayed the fence within ${s.opts.replicaFenceTimeoutMs} ms`,
      );
    }
    waiting = next;
    await sleep(2);
  }
  return { replicas, waitedMs: performance.now() - started };
}

function behind(s: Run, nodes: string, what: string): ShardflakeError {
  return new ShardflakeError(
    'MOVE_FAILED',
    `replica ${nodes} of server ${s.from} ${what}; a failover to it would bring back a writable old copy, so the move does not switch (if that replica is gone for good, declare it out with --skip-replica ${nodes.split(', ')[0]})`,
  );
}

import type { WaitGraph, WaitNode } from './graph.js';
import { type TransactionTag, younger } from './tag.js';

/** A set of sessions that wait for each other, none able to go on until one of them is cancelled. */
export interface Deadlock {
  /** The graph's node keys of every member. */
  readonly members: readonly string[];
  /** The transactions across shards among the members, oldest first. */
  readonly transactions: readonly TransactionTag[];
  /** The servers of the waits among the members, by name. */
  readonly servers: readonly string[];
  /** The member to cancel (chooseVictim). */
  readonly victim: TransactionTag;
}

/**
 * The strongly connected components of the graph (Tarjan's algorithm, without recursion), each with more than one
 * node.
 *
 * The rule: a component is a set of sessions each of which waits, directly or through others, for every other
 * one. No member can go on before another has ended, and none ends while it waits, so every component of more
 * than one node is a deadlock, and every cycle of waits lies inside exactly one component. Linear in the graph,
 * however many cycles overlap (a row's queue of waiters makes many).
 */
export function components(graph: WaitGraph): string[][] {
  const out = new Map<string, string[]>();
  for (const e of graph.edges) {
    const list = out.get(e.from) ?? [];
    list.push(e.to);
    out.set(e.from, list);
  }
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const found: string[][] = [];
  let next = 0;
  for (const root of graph.nodes.keys()) {
    if (index.has(root)) continue;
    // Each frame: a node and how far through its edges the walk is.
    const frames: { node: string; at: number }[] = [{ node: root, at: 0 }];
    index.set(root, next);
    low.set(root, next++);
    stack.push(root);
    onStack.add(root);
    while (frames.length > 0) {
      const frame = frames[frames.length - 1] as { node: string; at: number };
      const edges = out.get(frame.node) ?? [];
      if (frame.at < edges.length) {
        const to = edges[frame.at++] as string;
        if (!index.has(to)) {
          index.set(to, next);
          low.set(to, next++);
          stack.push(to);
          onStack.add(to);
          frames.push({ node: to, at: 0 });
        } else if (onStack.has(to)) {
          low.set(frame.node, Math.min(low.get(frame.node) as number, index.get(to) as number));
        }
        continue;
      }
      frames.pop();
      const parent = frames[frames.length - 1];
      if (parent)
        low.set(parent.node, Math.min(low.get(parent.node) as number, low.get(frame.node) as number));
      if (low.get(frame.node) === index.get(frame.node)) {
        const component: string[] = [];
        let member: string;
        do {
          member = stack.pop() as string;
          onStack.delete(member);
          component.push(member);
        } while (member !== frame.node);
        if (component.length > 1) found.push(component);
      }
    }
  }
  return found;
}

/**
 * The victim of a deadlock: its youngest transaction across shards (tag.ts `younger`).
 *
 * The rule, and why it picks one victim per deadlock: every router computes it from the same tags, so whichever
 * routers look at one deadlock agree on its victim, and only the victim's own router acts on it (detector.ts).
 * Youngest, as Citus does: it has done the least work, and since its age is kept across re-runs, a transaction
 * chosen once grows older than the newcomers and is not chosen for ever. Only a tagged transaction is eligible:
 * another session belongs to a client shardflake does not drive. A prepared transaction never waits, so it is
 * never a member (graph.ts), let alone a victim.
 */
export function chooseVictim(transactions: readonly TransactionTag[]): TransactionTag | undefined {
  let victim: TransactionTag | undefined;
  for (const t of transactions) if (!victim || younger(t, victim)) victim = t;
  return victim;
}

/**
 * The deadlocks across servers in the graph, each with its victim: components whose waits lie on two servers or
 * more. A component whose waits are all on one server is that server's own deadlock, which PostgreSQL's detector
 * breaks after deadlock_timeout (a second victim there would be one too many). A component that spans servers has
 * a transaction across shards among its members: going round it from a wait on one server to a wait on another
 * passes through a node present on both, and only a tagged transaction is (any other session is on one server).
 *
 * A component may hold several cycles (T1 ↔ T2 across a and b, T2 ↔ T3 across b and c). Its victim breaks those
 * it lies on; what is left without the victim is searched again, and each component of it that still spans
 * servers is a deadlock of its own with its own youngest victim — in this reading, not the next one half a second
 * later. So every victim is the youngest of a cycle that the victims before it left standing: a cycle is the cause
 * of at most one victim, and the victims of one reading are as many as its cycles need, found in one pass.
 */
export function findDeadlocks(graph: WaitGraph): Deadlock[] {
  const deadlocks: Deadlock[] = [];
  const work = components(graph).map((members) => ({ members, edges: graph.edges }));
  for (let next = work.pop(); next; next = work.pop()) {
    const inside = new Set(next.members);
    const edges = next.edges.filter((e) => inside.has(e.from) && inside.has(e.to));
    const servers = new Set(edges.map((e) => e.server));
    if (servers.size < 2) continue;
    const transactions = next.members
      .map((key) => (graph.nodes.get(key) as WaitNode).tag)
      .filter((t): t is TransactionTag => t !== undefined)
      .sort((a, b) => (younger(a, b) ? 1 : -1));
    const victim = chooseVictim(transactions);
    if (!victim) continue;
    deadlocks.push({ members: next.members, transactions, servers: [...servers].sort(), victim });
    // What is left once the victim is gone.
    const gone = `tx:${victim.txid}`;
    const rest = next.members.filter((key) => key !== gone);
    const restEdges = edges.filter((e) => e.from !== gone && e.to !== gone);
    const nodes = new Map(rest.map((key) => [key, graph.nodes.get(key) as WaitNode]));
    for (const members of components({ nodes, edges: restEdges })) work.push({ members, edges: restEdges });
  }
  return deadlocks;
}

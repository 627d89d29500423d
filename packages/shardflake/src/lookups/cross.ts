import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import type { RouterContext } from '../routing/context.js';
import { placementIn } from '../routing/map.js';
import type { CrossInternals, CrossTransaction } from '../transactions/cross.js';
import {
  type Change,
  changesOf,
  entryStatements,
  type NoticeWatch,
  netChanges,
  takeChanges,
  takeChangesSql,
  watchNotices,
} from './maintain.js';

/**
 * Steps 2–3 of maintain.ts on a cross-server transaction: every session the transaction joins is watched for the
 * capture trigger's notice, and one `beforeCommit` hook applies the changes of every joined shard on a server
 * that announced some, joining each entry shard h(v) as one more participant. The transaction's commit then makes
 * the rows and their entries durable together: one local COMMIT when all of them share a server, two-phase commit
 * (with the decision in the last agent's commit) otherwise.
 *
 * Connections. When the hook runs, the transaction already holds a connection on each server it wrote; an entry on
 * another server needs one more. Taken from the same pools, two transactions could each hold the last connection
 * of one server and wait for the other's (or a background recovery pass the last one): a deadlock no database
 * sees. So participants joined while committing come from a second set of pools (`commitNodes`, used by cross.ts
 * for joins made in its hooks), and the hook takes them in server-name order, all before writing anything:
 * a transaction waits for a commit-pool connection only while holding ordinary ones and commit-pool ones of
 * servers earlier in the order, never the reverse, so no cycle of waits can form.
 */
export interface KeptTransaction extends CrossInternals {
  /**
   * One statement in the placement's shard, in one round trip with the read of the change table its capture
   * triggers wrote (and the transaction's BEGIN): the commit then needs no read of that shard's changes. For the
   * router's single-row calls on a table with a lookup (routing/rows.ts).
   */
  writeKept(placement: ShardPlacement, text: string, values: unknown[]): Promise<pg.QueryResult>;
}

export function keepLookups(ctx: RouterContext, tx: CrossInternals): KeptTransaction {
  const watches = new Map<string, NoticeWatch>();
  const joined = new Map<number, { server: string; schema: string }>();
  // Shards a session may have written since their changes were last taken.
  const dirty = new Set<number>();
  const taken: Change[] = [];
  let hooked = false;
  const stop = () => {
    for (const watch of watches.values()) watch.stop();
    watches.clear();
  };
  const apply = async (cross: CrossTransaction) => {
    const map = await ctx.map.fresh();
    // Shards joined by the hook itself (entry shards) are not writers: only the ones joined before it are read.
    const writers = [...joined].filter(([shard, p]) => dirty.has(shard) && watches.get(p.server)?.pending);
    const changes: Change[] = [...taken];
    for (const [shard] of writers) {
      const session = await cross.join(placementIn(map, shard));
      changes.push(...(await takeChanges({ schema: session.schema, query: (t, v) => session.query(t, v) })));
    }
    const net = netChanges(changes, map.logicalShards);
    if (net.length === 0) return;
    // Every entry server this commit needs, joined in name order before any entry is written (see above).
    const held = new Set(cross.servers);
    const firstOnServer = new Map<string, number>();
    for (const change of net) {
      const server = placementIn(map, change.shard).server;
      if (!held.has(server) && !firstOnServer.has(server)) firstOnServer.set(server, change.shard);
    }
    for (const server of [...firstOnServer.keys()].sort())
      await cross.join(placementIn(map, firstOnServer.get(server) as number));
    // The entry writes go out with each server's commit step, in the same round trip (cross.ts, `defer`).
    for (const statement of entryStatements(net, (shard) => placementIn(map, shard).schema))
      await cross.defer(placementIn(map, statement.shard), statement);
  };
  const hook = (placement: ShardPlacement, client: pg.PoolClient | undefined) => {
    if (!joined.has(placement.shard)) joined.set(placement.shard, placement);
    if (client && !watches.has(placement.server)) watches.set(placement.server, watchNotices(client));
    if (!hooked) {
      hooked = true;
      tx.beforeCommit(apply);
    }
  };
  // The transaction with four methods of its own; the rest (getters included) from tx. Plain assignment: an
  // object made with property descriptors is slower to create and to use, and one is made per transaction.
  const kept = Object.create(tx) as KeptTransaction;
  kept.join = async (placement: ShardPlacement) => {
    const session = await tx.join(placement);
    // Only the first session of a server is watched: its notices are the connection's, shared by the others.
    hook(placement, watches.has(placement.server) ? undefined : session.client);
    dirty.add(placement.shard);
    return session;
  };
  kept.writeKept = async (placement: ShardPlacement, text: string, values: unknown[]) => {
    const [result, changes] = await tx.batch(placement, [
      { text, values },
      { text: takeChangesSql(placement.schema) },
    ]);
    hook(placement, undefined);
    taken.push(...changesOf((changes as pg.QueryResult).rows));
    return result as pg.QueryResult;
  };
  kept.commit = () => tx.commit().finally(stop);
  kept.rollback = () => tx.rollback().finally(stop);
  return kept;
}

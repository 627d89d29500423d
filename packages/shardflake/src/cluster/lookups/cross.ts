import type { RouterContext } from '../router/context.js';
import { placementIn } from '../router/map.js';
import type { CrossInternals, CrossTransaction } from '../transactions/cross.js';
import {
  type Change,
  type NoticeWatch,
  netChanges,
  takeChanges,
  watchNotices,
  writeEntries,
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
export function keepLookups(ctx: RouterContext, tx: CrossInternals): CrossInternals {
  const watches = new Map<string, NoticeWatch>();
  const joined = new Map<number, { server: string; schema: string }>();
  let hooked = false;
  const stop = () => {
    for (const watch of watches.values()) watch.stop();
    watches.clear();
  };
  const apply = async (cross: CrossTransaction) => {
    const map = await ctx.map.fresh();
    // Shards joined by the hook itself (entry shards) are not writers: only the ones joined before it are read.
    const writers = [...joined].filter(([, p]) => watches.get(p.server)?.pending);
    const changes: Change[] = [];
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
    await writeEntries(net, async (entryShard) => {
      const entry = await cross.join(placementIn(map, entryShard));
      return { schema: entry.schema, query: (text, values) => entry.query(text, values) };
    });
  };
  return Object.create(tx, {
    join: {
      value: async (placement: Parameters<CrossTransaction['join']>[0]) => {
        const session = await tx.join(placement);
        if (!joined.has(placement.shard)) joined.set(placement.shard, placement);
        if (!watches.has(placement.server)) watches.set(placement.server, watchNotices(session.client));
        if (!hooked) {
          hooked = true;
          tx.beforeCommit(apply);
        }
        return session;
      },
    },
    commit: { value: () => tx.commit().finally(stop) },
    rollback: { value: () => tx.rollback().finally(stop) },
  }) as CrossInternals;
}

import type { RouterContext } from '../router/context.js';
import { placementIn } from '../router/map.js';
import type { CrossInternals, CrossTransaction } from '../transactions/cross.js';
import { applyPendingChanges, type NoticeWatch, watchNotices } from './maintain.js';

/**
 * Steps 2–3 of maintain.ts on a cross-server transaction: every session the transaction joins is watched for the
 * capture trigger's notice, and one `beforeCommit` hook applies the changes of every joined shard on a server
 * that announced some, joining each entry shard h(v) as one more participant. The transaction's commit then makes
 * the rows and their entries durable together: one local COMMIT when all of them share a server, two-phase commit
 * (with the decision in the last agent's commit) otherwise.
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
    for (const [shard, placement] of writers) {
      const session = await cross.join(placementIn(map, shard));
      await applyPendingChanges(
        { schema: placement.schema, query: (text, values) => session.query(text, values) },
        map.logicalShards,
        async (entryShard) => {
          const entry = await cross.join(placementIn(map, entryShard));
          return { schema: entry.schema, query: (text, values) => entry.query(text, values) };
        },
      );
    }
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

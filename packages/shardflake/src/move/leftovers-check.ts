import { isFinal, listMoves } from '../catalog/moves.js';
import { readShardMap } from '../catalog/shards.js';
import type { Problem, VerifyCheck } from '../config/verify-check.js';
import { isFenced } from '../fence/fence.js';
import { conflictOf } from './leftovers.js';

/**
 * The `cluster verify` check of leftover copies (leftovers.ts): a shard's schema on a server the catalog does not
 * place it on, outside a running move, that is not fenced, or that no longer holds what its move verified — a
 * conflict `cluster cleanup` keeps rather than drop, with the rows to reconcile. It reads only: fencing and
 * dropping are cleanup's. (Moves are not part of the library's cluster layer, so the CLI adds this check to
 * VERIFY_CHECKS: `verifyCluster(config, { checks: [...VERIFY_CHECKS, leftoversCheck] })`.)
 */
const NAME = 'leftover copies of moved shards';

export const leftoversCheck: VerifyCheck = {
  name: NAME,
  async run(config, pools) {
    const { map, moves } = await pools.use(config.catalog, async (catalog) => ({
      map: await readShardMap(catalog),
      moves: await listMoves(catalog).catch(() => []),
    }));
    const home = new Map(map.shards.map((s) => [s.shard, s.server]));
    const live = new Set(moves.filter((m) => !isFinal(m.phase)).map((m) => m.shard));
    const problems: Problem[] = [];
    for (const server of pools.servers) {
      await pools.use(server, async (client) => {
        const { rows } = await client.query(
          `SELECT nspname::text AS schema FROM pg_namespace WHERE nspname ~ ('^' || $1 || '[0-9]{4}$') ORDER BY 1`,
          [config.schemaPrefix],
        );
        for (const { schema } of rows as { schema: string }[]) {
          const shard = Number(schema.slice(config.schemaPrefix.length));
          const at = home.get(shard);
          if (at === undefined || at === server || live.has(shard)) continue;
          const where = `shard ${shard} (${schema}) on server ${server}`;
          if (!(await isFenced(client, schema))) {
            problems.push({
              check: NAME,
              where,
              what: `a leftover copy that is NOT fenced (the shard lives on server ${at}): writes there are lost to its home; run cluster cleanup`,
            });
          }
          const conflict = await pools.use(at, (homeClient) =>
            conflictOf(client, homeClient, { shard, server, schema }, moves),
          );
          if (conflict) {
            problems.push({
              check: NAME,
              where,
              what: `changed after move #${conflict.moveId} fenced it (${conflict.differences.join('; ')}); reconcile ${conflict.rowsToReconcile.length > 0 ? conflict.rowsToReconcile.join(', ') : 'its rows'} with server ${at}, then drop it by hand`,
            });
          }
        }
      });
    }
    return problems;
  },
};

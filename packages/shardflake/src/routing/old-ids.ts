import type { AdoptionRouting } from '../catalog/adopt.js';
import type { ShardPlacement } from '../catalog/shards.js';
import { isOldId } from '../postgres/id-shard-rule.js';
import { shardForKey } from './shard-key.js';

/**
 * A cluster adopted from a live database (src/adopt/, catalog/adopt.ts), as the router sees it.
 *
 * Before the switch, every shard is served from the source: each placement names the source server and its schema,
 * so sessions, single-row calls and bulk writes run there with the same SQL as before, and the cutover's fence and
 * switch reach the router exactly as a move's do (SF001, retry, the new map). After it, rows keep their old ids:
 * an old root id routes as the integer key it was (id mod logicalShards), and an old id of another adopted table is
 * found through its old-id entry (one read of shard id mod logicalShards, rows.ts) — at most one extra read.
 */

/** The one boundary check (postgres/id-shard-rule.ts): an id below the adoption's bound was made by the source. */
export { isOldId };

/** The map as routers serve it while an adoption runs: every shard on the source (else the map as it is). */
export function servedDuringAdoption<M extends { shards: ShardPlacement[]; adoption?: AdoptionRouting }>(
  state: M,
  adoption: AdoptionRouting | null,
): M {
  if (!adoption) return state;
  if (!adoption.servingFromSource) return { ...state, adoption };
  const shards: ShardPlacement[] = state.shards.map((s) =>
    s ? { shard: s.shard, server: adoption.sourceServer, schema: adoption.sourceSchema, state: 'moving' } : s,
  );
  return { ...state, shards, adoption };
}

/** The shard of an old id taken as a root id: the rule of an integer shard key. */
export function shardOfOldRootId(logicalShards: number, id: bigint): number {
  return shardForKey(id as never, logicalShards);
}

/** Whether row `id` of `table` needs its old-id entry read to be found (an old id of a non-root adopted table). */
export function needsOldIdEntry(adoption: AdoptionRouting | undefined, table: string, id: unknown): boolean {
  return (
    adoption !== undefined &&
    !adoption.servingFromSource &&
    typeof id === 'bigint' &&
    isOldId(id, adoption.oldIdsBelow) &&
    table !== adoption.root &&
    adoption.tables.includes(table)
  );
}

import {
  installLookupCatalog,
  readLookups,
  recordLookup,
  setDirectInsert,
  setOwnerIndex,
} from '../catalog/lookups.js';
import type { ClusterConfig } from '../config/config.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * `cluster init`'s part: shards made by init carry the config's lookups from the start (shard-ddl.ts), so a
 * cluster whose every shard this run created has its lookups built and ready, with their owner indexes and the
 * capture function that lets a direct insert through (ddl.ts). A lookup added to the config of a cluster that already had shards is left unrecorded: `cluster
 * migrate` builds it (build.ts).
 */
export async function recordLookupsAfterInit(
  catalog: Queryable,
  config: Pick<ClusterConfig, 'lookups'>,
  createdEveryShard: boolean,
): Promise<void> {
  const lookups = config.lookups ?? [];
  if (lookups.length === 0) return;
  await installLookupCatalog(catalog);
  if (!createdEveryShard) return;
  const known = await readLookups(catalog);
  for (const lookup of lookups) {
    if (known.has(lookup.name)) continue;
    await recordLookup(catalog, lookup, 'ready');
    if (lookup.unique) await setOwnerIndex(catalog, lookup.name);
    await setDirectInsert(catalog, lookup.name);
  }
}

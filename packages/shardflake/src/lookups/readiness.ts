import { type LookupRecord, readLookups } from '../catalog/lookups.js';
import type { LookupDefinition } from '../config/lookups.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import type { RouterContext } from '../routing/context.js';
import { acquireOn, isConnectionLost } from '../routing/lease.js';
import { describeLookup, sameDefinition } from './ddl.js';
import type { Readiness } from './read.js';

/** How long a ready lookup without its owner index goes before the catalog is asked again (a migrate may add it). */
const OWNER_INDEX_RECHECK_MS = 60_000;

/**
 * Whether a lookup may be read: the catalog must record it as built (`ready`) with the definition the router's
 * config gives. A lookup only ever goes from building to ready, so once seen ready it is remembered and never asked
 * again; until then every read asks the catalog (a build in progress is writing entries that are not complete).
 * Resolves to whether every shard has the lookup's owner index (catalog `owner_index`), which the owner cache
 * needs: also remembered once true; while false, asked again at most once a minute.
 */
export function lookupReadiness(ctx: RouterContext, catalog: string): Readiness {
  const ready = new Map<string, { ownerIndex: boolean; at: number }>();
  return async (lookup: LookupDefinition) => {
    const known = ready.get(lookup.name);
    if (known && (known.ownerIndex || performance.now() - known.at < OWNER_INDEX_RECHECK_MS))
      return known.ownerIndex;
    let record: LookupRecord | undefined;
    try {
      const lease = await acquireOn(ctx, catalog, { intent: 'write' });
      try {
        record = (await readLookups(lease.client)).get(lookup.name);
        lease.release();
      } catch (error) {
        lease.release(isConnectionLost(error, lease.client) ? error : undefined);
        throw wrapPgError(error, lease.node);
      }
    } catch (error) {
      // A lookup seen ready stays readable while the catalog does not answer; only its index is not learned yet.
      if (!known) throw error;
      known.at = performance.now();
      return false;
    }
    if (record?.phase !== 'ready')
      throw new ShardflakeError(
        'LOOKUP_NOT_READY',
        `lookup ${lookup.name} is ${record ? `being built (phase ${record.phase})` : 'not built'}; run cluster migrate`,
      );
    if (!sameDefinition(record, lookup))
      throw new ShardflakeError(
        'INVALID_CONFIG',
        `lookup ${lookup.name} is built for ${describeLookup(record)}, not what the config says`,
      );
    ready.set(lookup.name, { ownerIndex: record.ownerIndex, at: performance.now() });
    return record.ownerIndex;
  };
}

/**
 * Whether an insert into a table with these lookups may write its entries itself (insert-beside.ts "direct"):
 * every one built (`ready`), with the definition the config gives, and `direct_insert` in the catalog (every
 * shard's capture function lets it through). Never throws and never makes a write wait for the catalog more than
 * once a minute: true is remembered for good, anything else (a lookup being built, a catalog that does not
 * answer) is asked again at most once a minute, and the insert meanwhile writes the entries the ordinary way.
 */
export function lookupDirectInsert(
  ctx: RouterContext,
  catalog: string,
): (lookups: readonly LookupDefinition[]) => Promise<boolean> {
  const known = new Map<string, { direct: boolean; at: number }>();
  // One catalog read at a time per lookup: the inserts that arrive meanwhile wait for its answer.
  const asking = new Map<string, Promise<boolean>>();
  const one = (lookup: LookupDefinition): Promise<boolean> | boolean => {
    const seen = known.get(lookup.name);
    if (seen && (seen.direct || performance.now() - seen.at < OWNER_INDEX_RECHECK_MS)) return seen.direct;
    let pending = asking.get(lookup.name);
    if (!pending) {
      pending = ask(lookup).finally(() => asking.delete(lookup.name));
      asking.set(lookup.name, pending);
    }
    return pending;
  };
  const ask = async (lookup: LookupDefinition): Promise<boolean> => {
    let direct = false;
    try {
      const lease = await acquireOn(ctx, catalog, { intent: 'write' });
      try {
        const record = (await readLookups(lease.client)).get(lookup.name);
        lease.release();
        direct = record?.phase === 'ready' && record.directInsert && sameDefinition(record, lookup);
      } catch (error) {
        lease.release(isConnectionLost(error, lease.client) ? error : undefined);
      }
    } catch {
      // No catalog connection now: the ordinary way, and another look in a minute.
    }
    known.set(lookup.name, { direct, at: performance.now() });
    return direct;
  };
  return async (lookups) => {
    for (const lookup of lookups) if (!(await one(lookup))) return false;
    return true;
  };
}

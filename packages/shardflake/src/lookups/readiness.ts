import { type LookupRecord, readLookups } from '../catalog/lookups.js';
import type { LookupDefinition } from '../config/lookups.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import type { RouterContext } from '../routing/context.js';
import { acquireOn, isConnectionLost } from '../routing/lease.js';
import { describeLookup, sameDefinition } from './ddl.js';
import type { Readiness } from './read.js';

/**
 * Whether a lookup may be read: the catalog must record it as built (`ready`) with the definition the router's
 * config gives. A lookup only ever goes from building to ready, so once seen ready it is remembered and never asked
 * again; until then every read asks the catalog (a build in progress is writing entries that are not complete).
 */
export function lookupReadiness(ctx: RouterContext, catalog: string): Readiness {
  const ready = new Set<string>();
  return async (lookup: LookupDefinition) => {
    if (ready.has(lookup.name)) return;
    const lease = await acquireOn(ctx, catalog, { intent: 'write' });
    let record: LookupRecord | undefined;
    try {
      record = (await readLookups(lease.client)).get(lookup.name);
      lease.release();
    } catch (error) {
      lease.release(isConnectionLost(error, lease.client) ? error : undefined);
      throw wrapPgError(error, lease.node);
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
    ready.add(lookup.name);
  };
}

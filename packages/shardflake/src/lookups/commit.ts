import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import { ShardflakeError } from '../errors/errors.js';
import type { RouterContext, SessionLookups } from '../routing/context.js';
import { placementIn } from '../routing/map.js';
import { applyPendingChanges, type JoinShard, watchNotices } from './maintain.js';

/**
 * Step 2 of maintain.ts for a plain shard session (a router created without the config's lookups) that is about
 * to commit on one server: entry shards on the same server are written in the session's own transaction (same
 * connection, schema-qualified statements), which then commits as one local transaction. An entry on another
 * server would need the cross-server commit, which a router with lookups uses for every write session
 * (lookups/cross.ts); here it is refused and the session rolls back.
 */
export async function applyBeforeLocalCommit(
  ctx: RouterContext,
  placement: ShardPlacement,
  client: pg.ClientBase,
): Promise<void> {
  const map = await ctx.map.fresh();
  const query = (text: string, values?: unknown[]) => client.query(text, values);
  const join: JoinShard = async (shard) => {
    const entry = placementIn(map, shard);
    if (entry.server !== placement.server)
      throw new ShardflakeError(
        'NOT_SUPPORTED',
        `a write in shard ${placement.shard} changed a lookup whose entry lives on server ${entry.server}; only a router created with the config's lookups can commit that (createRouter(config) with config.lookups)`,
      );
    return { schema: entry.schema, query };
  };
  await applyPendingChanges({ schema: placement.schema, query }, map.logicalShards, join);
}

/** What every shard session of a router does for lookups (routing/session.ts calls it through the context). */
export const sessionLookups: SessionLookups = { watch: watchNotices, beforeCommit: applyBeforeLocalCommit };

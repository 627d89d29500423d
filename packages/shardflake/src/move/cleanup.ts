import type pg from 'pg';
import { installMoves, isFinal, listMoves, markOldCopyDropped, streamId } from '../catalog/moves.js';
import { readShardMap } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import { isShardflakeError } from '../errors/errors.js';
import { fenceSchema, isFenced } from '../fence/fence.js';
import { dropFenceGuardIfUnusedSql } from '../fence/guard.js';
import { lockShard, unlockShard } from '../fence/shard-lock.js';
import { connectServer } from '../topology/connections.js';
import { conflictOf, type LeftoverConflict } from './leftovers.js';
import { dropPublication, dropSlots, dropSubscription, REPLICATION_PREFIX } from './replication.js';
import { settleMove } from './settle.js';
import { dropSchema } from './tables.js';

/**
 * `cluster cleanup`: ends what moves left behind.
 *
 * 1. Unfinished moves whose process is gone (their shard lock is free): finished if they had switched the
 *    catalog, rolled back otherwise. A move still running (lock held) is left alone.
 * 2. Shard schemas on a server the catalog does not place them on: fenced old copies of finished moves, and
 *    target copies of rolled-back moves. The catalog's placement is never dropped, and a shard is locked while
 *    its copies are dropped, so a move cannot start beside it. An unfenced one is fenced first, and an old copy
 *    that no longer matches what its move verified is kept and reported as a conflict (leftovers.ts).
 * 3. Replication objects named `sf_move_<id>` (subscriptions, publications, slots, and the subscriptions'
 *    table-sync slots) of moves that have ended.
 */
export interface CleanupResult {
  /** Unfinished moves no live process held, settled now (none with `dryRun`). */
  settled: {
    /** The id of the move's record in the catalog. */
    moveId: bigint;
    /** The logical shard the move was for. */
    shard: number;
    /**
     * `finished` when the move had switched the catalog, `rolled_back` when the shard stayed where it was.
     */
    outcome: 'finished' | 'rolled_back';
  }[];
  /** Shard copies on servers the catalog does not place them on, dropped (with `dryRun`: to be dropped). */
  droppedCopies: {
    /** The logical shard the copy was of. */
    shard: number;
    /** The server the leftover copy was on (not the shard's home). */
    server: string;
    /** The copy's schema on that server. */
    schema: string;
    /** True when the copy was already fenced before cleanup found it. */
    fenced: boolean;
  }[];
  /** Leftover copies found writable and fenced on the spot. */
  fencedOnDiscovery: {
    /** The logical shard the copy is of. */
    shard: number;
    /** The server the writable leftover copy is on. */
    server: string;
    /** The copy's schema on that server. */
    schema: string;
  }[];
  /** Old copies that took writes after their fence (or hold an older state): kept, with what to reconcile. */
  conflicts: LeftoverConflict[];
  /**
   * Replication objects `sf_move_<id>` of ended moves, dropped (with `dryRun`: those that would be, but
   * slots).
   */
  droppedReplication: {
    /** The server the object was on. */
    server: string;
    /** What kind of replication object it was. */
    kind: 'subscription' | 'publication' | 'slot';
    /** The object's name, `sf_move_<id>` or a table-sync slot of that subscription. */
    name: string;
  }[];
  /** What cleanup left alone and why, one sentence each (a running move, a server that did not answer, …). */
  skipped: string[];
}

/** Options of `cleanupCluster`. */
export interface CleanupOptions {
  /** Report what would be dropped without dropping it. */
  dryRun?: boolean;
}

/**
 * Settles what moves left behind (`shardflake cluster cleanup`): finishes or rolls back each unfinished move no
 * live process holds, drops fenced old copies whose rows match what their move recorded, and drops replication
 * objects no move owns. A copy that no longer matches is kept and reported as a conflict.
 */
export async function cleanupCluster(
  config: ClusterConfig,
  options: CleanupOptions = {},
): Promise<CleanupResult> {
  const result: CleanupResult = {
    settled: [],
    droppedCopies: [],
    fencedOnDiscovery: [],
    conflicts: [],
    droppedReplication: [],
    skipped: [],
  };
  const catalog = await connectServer(config, config.catalog, { applicationName: 'shardflake cleanup' });
  const clients = new Map<string, pg.Client>();
  try {
    await installMoves(catalog);
    for (const move of await listMoves(catalog)) {
      if (isFinal(move.phase)) continue;
      try {
        await lockShard(catalog, move.shard);
      } catch (error) {
        if (isShardflakeError(error, 'SHARD_BUSY')) {
          result.skipped.push(`move #${move.id} of shard ${move.shard} is running`);
          continue;
        }
        throw error;
      }
      try {
        if (!options.dryRun) {
          const outcome = await settleMove(config, catalog, move, 'interrupted; settled by cluster cleanup');
          result.settled.push({ moveId: move.id, shard: move.shard, outcome });
        }
      } catch (error) {
        result.skipped.push(`move #${move.id} of shard ${move.shard}: ${(error as Error).message}`);
      } finally {
        await unlockShard(catalog, move.shard);
      }
    }

    for (const name of Object.keys(config.servers)) {
      try {
        clients.set(name, await connectServer(config, name, { applicationName: 'shardflake cleanup' }));
      } catch (error) {
        result.skipped.push(`server ${name}: ${(error as Error).message}`);
      }
    }
    const map = await readShardMap(catalog);
    const home = new Map(map.shards.map((s) => [s.shard, s.server]));
    const moves = await listMoves(catalog);
    const live = new Set(moves.filter((m) => !isFinal(m.phase)).map((m) => m.shard));

    for (const [server, client] of clients) {
      const { rows } = await client.query(
        `SELECT nspname AS schema FROM pg_namespace WHERE nspname ~ ('^' || $1 || '[0-9]{4}$') ORDER BY nspname`,
        [config.schemaPrefix],
      );
      for (const { schema } of rows as { schema: string }[]) {
        const shard = Number(schema.slice(config.schemaPrefix.length));
        const at = home.get(shard);
        if (at === undefined || at === server || live.has(shard)) continue;
        try {
          await lockShard(catalog, shard);
        } catch {
          result.skipped.push(`shard ${shard} on server ${server}: a move of it is running`);
          continue;
        }
        try {
          const fenced = await isFenced(client, schema);
          if (!fenced && !options.dryRun) {
            await fenceSchema(
              client,
              schema,
              `shard ${shard} lives on server ${at}; this copy on server ${server} is a leftover (fenced on discovery by cluster cleanup)`,
            );
            result.fencedOnDiscovery.push({ shard, server, schema });
          }
          const conflict = await conflictOf(client, clients.get(at), { shard, server, schema }, moves);
          if (conflict) {
            result.conflicts.push(conflict);
            continue;
          }
          if (!options.dryRun) {
            await dropSchema(client, schema);
            for (const m of moves) {
              if (m.shard === shard && m.from === server && m.phase === 'done')
                await markOldCopyDropped(catalog, m.id);
            }
          }
          result.droppedCopies.push({ shard, server, schema, fenced });
        } finally {
          await unlockShard(catalog, shard);
        }
      }
    }

    if (!options.dryRun) for (const c of clients.values()) await c.query(dropFenceGuardIfUnusedSql()); // fence-guard.ts
    // A set's replication objects are named after the set (its first move's id): they are leftovers once every
    // move of the set has ended.
    const streams = new Map<bigint, { ended: boolean; from: string; subscriptionOid: bigint | null }>();
    for (const m of moves) {
      const id = streamId(m);
      const known = streams.get(id);
      streams.set(id, {
        ended: (known?.ended ?? true) && isFinal(m.phase),
        from: m.from,
        subscriptionOid: known?.subscriptionOid ?? m.subscriptionOid,
      });
    }
    const endedId = (name: string): bigint | null => {
      if (!name.startsWith(REPLICATION_PREFIX)) return null;
      const id = BigInt(name.slice(REPLICATION_PREFIX.length));
      return streams.get(id)?.ended ? id : null;
    };
    for (const [server, client] of clients) {
      const subs = await client.query(
        `SELECT subname::text AS name FROM pg_subscription
          WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND subname ~ ('^' || $1 || '[0-9]+$')`,
        [REPLICATION_PREFIX],
      );
      for (const { name } of subs.rows as { name: string }[]) {
        if (endedId(name) === null) continue;
        if (!options.dryRun) await dropSubscription(client, name, true);
        result.droppedReplication.push({ server, kind: 'subscription', name });
      }
      const pubs = await client.query(
        `SELECT pubname::text AS name FROM pg_publication WHERE pubname ~ ('^' || $1 || '[0-9]+$')`,
        [REPLICATION_PREFIX],
      );
      for (const { name } of pubs.rows as { name: string }[]) {
        if (endedId(name) === null) continue;
        if (!options.dryRun) await dropPublication(client, name);
        result.droppedReplication.push({ server, kind: 'publication', name });
      }
      for (const [id, stream] of streams) {
        if (!stream.ended || stream.from !== server) continue;
        const slot = `${REPLICATION_PREFIX}${id}`;
        const dropped = options.dryRun ? [] : await dropSlots(client, slot, stream.subscriptionOid);
        for (const name of dropped) result.droppedReplication.push({ server, kind: 'slot', name });
      }
    }
    return result;
  } finally {
    await Promise.all([catalog, ...clients.values()].map((c) => c.end().catch(() => {})));
  }
}

import { type AdoptionRouting, readAdoptionRouting } from '../catalog/adopt.js';
import { readReferenceCopies } from '../catalog/reference-copies.js';
import { readServers } from '../catalog/servers.js';
import {
  MAP_CHANNEL,
  readClusterInfo,
  readShardChanges,
  readShardMap,
  type ShardPlacement,
} from '../catalog/shards.js';
import { shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { ShardflakeId } from '../ids/id.js';
import { type Layout, type LayoutField, resolveLayout, withEpoch } from '../ids/layout.js';
import { type Queryable, wrapPgError } from '../postgres/connect.js';
import type { RouterEvent } from '../telemetry/events.js';
import { catalogConnection } from './catalog-connection.js';
import { isOldId, servedDuringAdoption, shardOfOldRootId } from './old-ids.js';

/**
 * The router's copy of the shard map, and how it stays current.
 *
 * It reads the map from the catalog once, then keeps it current by LISTENing on `shardflake_map`: a notification
 * newer than the map marks it stale and every operation waits for the refresh, so the router never acts on a map
 * older than the catalog's while the catalog answers. A refresh reads only the shards whose placement changed
 * since the map it has (catalog/shards.ts, readShardChanges: each writer stamps the rows it changes with the
 * version it raises), so a map version costs the catalog its changed shards, not the whole map. The whole map is
 * read at the first load, after the catalog connection was lost or moved, when the catalog's version is behind
 * the router's, and on router.refresh(). Reads and the LISTEN share one connection (catalog-connection.ts); if it
 * drops, the map is re-read (and LISTEN set up again) at once.
 *
 * When the catalog does not answer (a refresh fails and a map is already loaded), the router keeps serving from its
 * last map and reports `catalog-down`; a timer retries every `reconnectMs` and, once the catalog answers, LISTENs and
 * re-reads the map and reports `catalog-up`. Serving from an old map is safe because of how shards move: a move
 * needs the catalog to switch the map, and it fences the old copy (a trigger raising SF001 on every write) in the
 * same transaction that pauses writes, before the switch. So during an outage either no move has finished, and
 * the last map is still right, or a move finished just before it, and a write routed by the old map reaches the
 * fenced copy, fails with SF001 without changing a row, and is retried (up to `writeRetryMs`) or reported as
 * SHARD_FENCED. A stale map can misdirect a read to the old copy (which holds the rows as of the cutover), but
 * it can never place a row where no one will find it, or lose one.
 */
export interface MapState {
  version: bigint;
  logicalShards: number;
  layout: Layout;
  shardField: LayoutField;
  shards: ShardPlacement[];
  /** The prefix of the shards' schema names (`shard_`). */
  schemaPrefix: string;
  /** The servers the catalog knows (catalog/servers.ts): node addresses without passwords. */
  servers: Map<string, string[]>;
  /** The servers the catalog records as holding a synced copy of the reference tables (catalog/reference-copies.ts). */
  referenceCopies: string[];
  /** A cluster adopted from a live database: its boundary of old ids, and before the switch the source (old-ids.ts). */
  adoption?: AdoptionRouting;
}

export interface ShardMapOptions {
  listen: boolean;
  /** How often to try the catalog again while it is down (ms). */
  reconnectMs: number;
  catalogServer: string;
  emit: ((event: RouterEvent) => void) | undefined;
  onMapChange: ((version: bigint) => void) | undefined;
  /**
   * Finds the catalog server's primary again (a catalog server with replicas): asked when the LISTEN connection
   * was lost and while the catalog is down, so after a failover the map is read from, and listened to on, the
   * promoted node.
   */
  locateCatalog?: () => Promise<string>;
}

/** How a refresh read the catalog: the whole map, or the shards changed since the map it had. */
export interface MapRead {
  kind: 'full' | 'changes';
  /** Shard rows read: every shard for a full read, the changed ones otherwise. */
  shardRows: number;
  /** The map version it read. */
  version: bigint;
}

export interface ShardMapCache {
  /** The loaded map (undefined only before the first load). */
  readonly state: MapState | undefined;
  /** True while the catalog does not answer and the router serves from its last map. */
  readonly catalogDown: boolean;
  /** The map, at least as new as the catalog's last announced version (or the last one, while the catalog is down). */
  fresh(): Promise<MapState>;
  /** Re-reads the map now; throws when the catalog does not answer. */
  reload(): Promise<MapState>;
  /** The router's catalog connection (reads only: the map's module owns it and follows a catalog failover). */
  readonly catalog: Queryable;
  /** How the last refresh read the catalog (undefined before the first). */
  readonly lastRead: MapRead | undefined;
  /** Marks the map as possibly old: the next `fresh()` re-reads it (unless the catalog is down). */
  markStale(): void;
  /** Resolves 'map' once the loaded map is newer than `version`, or 'timeout' after `ms`. */
  newerMap(version: bigint, ms: number): Promise<'map' | 'timeout'>;
  close(): Promise<void>;
}

export function createShardMap(firstCatalogUrl: string, options: ShardMapOptions): ShardMapCache {
  let state: MapState | undefined;
  // The catalog's placements as read (state.shards differs while an adoption serves from the source): a refresh
  // patches these with the rows changed since state.version.
  let placements: ShardPlacement[] = [];
  // True when the next refresh must read the whole map: before the first, after the connection was lost or moved.
  let readAll = true;
  let stale = true;
  let refreshing: Promise<void> | undefined;
  let closed = false;
  let down: ShardflakeError | undefined;
  let reconnectTimer: NodeJS.Timeout | undefined;
  let lastRead: MapRead | undefined;
  // Operations waiting to retry: each is woken by the first map newer than the one its attempt used.
  const mapWaiters = new Map<() => void, bigint>();

  const connection = catalogConnection(firstCatalogUrl, {
    channel: options.listen ? MAP_CHANNEL : undefined,
    onNotification(payload) {
      const version = payload ? BigInt(payload) : undefined;
      if (!state || version === undefined || version > state.version) {
        stale = true;
        // Refresh at once, so the next operation rarely has to wait; a failure is an outage (see fresh()).
        cache.fresh().catch(() => {});
      }
    },
    onLost() {
      stale = true;
      // Notifications sent while no one listened are gone: the whole map is read again.
      readAll = true;
      // The catalog may be going away: find out now rather than on the next operation.
      if (!closed && options.listen) cache.fresh().catch(() => {});
    },
  });
  const catalog = connection.reader;

  /** The whole map: the first load, and whenever what changed since the last one cannot be known. */
  async function readWhole(): Promise<{
    version: bigint;
    layout: Layout;
    logicalShards: number;
    prefix: string;
  }> {
    const info = await readClusterInfo(catalog);
    if (!info)
      throw new ShardflakeError(
        'INVALID_CONFIG',
        `no cluster on catalog server ${options.catalogServer}; run cluster init first`,
      );
    const map = await readShardMap(catalog);
    placements = [];
    for (const s of map.shards) placements[s.shard] = s;
    return {
      version: map.version,
      layout: withEpoch(resolveLayout(info.layout), info.epochMs),
      logicalShards: info.logicalShards,
      prefix: info.schemaPrefix,
    };
  }

  async function load(whole: boolean): Promise<void> {
    try {
      const previousState = state;
      let version: bigint;
      let read: { kind: 'full' | 'changes'; shardRows: number };
      let fixed: { layout: Layout; logicalShards: number; prefix: string };
      const changes =
        whole || !previousState ? undefined : await readShardChanges(catalog, previousState.version);
      // The whole map again when the changes cannot say what changed: a catalog behind this map (restored, or a
      // replica promoted before it caught up), or a new version without a changed shard (a new reference copy, a
      // change made by hand or by a writer that does not stamp its rows). Versions without a shard are rare.
      const unexplained =
        changes !== undefined && previousState !== undefined && changes.version !== previousState.version
          ? changes.shards.length === 0 || changes.version < previousState.version
          : false;
      if (!previousState || !changes || unexplained) {
        const w = await readWhole();
        version = w.version;
        fixed = w;
        read = { kind: 'full', shardRows: placements.filter(Boolean).length };
      } else {
        if (changes.shards.length > 0) {
          placements = [...placements];
          for (const s of changes.shards) placements[s.shard] = s;
        }
        version = changes.version;
        fixed = {
          layout: previousState.layout,
          logicalShards: previousState.logicalShards,
          prefix: previousState.schemaPrefix,
        };
        read = { kind: 'changes', shardRows: changes.shards.length };
      }
      readAll = false;
      // Servers, reference copies and the adoption: a few rows each, whatever the shard count.
      const servers = await readServers(catalog);
      const referenceCopies = await readReferenceCopies(catalog);
      const adoption = await readAdoptionRouting(catalog);
      const shardField = fixed.layout.fields.find((f) => f.kind === 'shard');
      if (!shardField)
        throw new ShardflakeError('INVALID_LAYOUT', `layout ${fixed.layout.name} has no shard field`);
      const previous = previousState?.version ?? 0n;
      state = servedDuringAdoption(
        {
          version,
          logicalShards: fixed.logicalShards,
          layout: fixed.layout,
          shardField,
          shards: placements,
          schemaPrefix: fixed.prefix,
          servers,
          referenceCopies,
        },
        adoption,
      );
      lastRead = { ...read, version };
      options.onMapChange?.(version);
      if (options.emit && version !== previous)
        options.emit({
          type: 'map',
          version,
          previous,
          read: read.kind,
          shardRows: read.shardRows,
          ...(adoption ? { adoption: adoption.servingFromSource ? 'source' : 'shards' } : {}),
        });
      for (const [wake, waitedFor] of mapWaiters) if (version > waitedFor) wake();
    } catch (error) {
      throw wrapPgError(error);
    }
  }
  /** Moves to the catalog server's current primary when it is another node than the one in use. */
  async function followCatalog(): Promise<void> {
    if (!options.locateCatalog) return;
    const found = await options.locateCatalog().catch(() => connection.url);
    // Closed while the primary was looked for: nothing new is opened (the connection refuses once closed).
    if (found === connection.url || closed) return;
    readAll = true;
    await connection.moveTo(found);
  }

  /** One refresh at a time; concurrent callers share it. */
  function refreshOnce(whole = false): Promise<void> {
    if (!refreshing) {
      refreshing = (async () => {
        // Clear the flag first: a notification that arrives during the read sets it again.
        stale = false;
        if (down || !connection.connected) await followCatalog();
        // Open (and LISTEN) before reading, so no change made after the read goes unannounced.
        await connection.open();
        await load(whole || readAll);
      })().finally(() => {
        refreshing = undefined;
      });
    }
    return refreshing;
  }

  function enterOutage(error: unknown): void {
    stale = false;
    if (down) return;
    down = error instanceof ShardflakeError ? error : wrapPgError(error);
    options.emit?.({ type: 'catalog-down', server: options.catalogServer, error: down });
    scheduleReconnect();
  }

  function scheduleReconnect(): void {
    if (closed || reconnectTimer) return;
    reconnectTimer = setTimeout(async () => {
      reconnectTimer = undefined;
      try {
        await refreshOnce();
        down = undefined;
        options.emit?.({ type: 'catalog-up', server: options.catalogServer });
      } catch {
        scheduleReconnect();
      }
    }, options.reconnectMs);
    // A router must never keep its process alive on its own.
    reconnectTimer.unref();
  }

  const cache: ShardMapCache = {
    get state() {
      return state;
    },
    get catalogDown() {
      return down !== undefined;
    },
    get catalog() {
      return catalog;
    },
    get lastRead() {
      return lastRead;
    },

    async fresh() {
      while (stale || !state) {
        if (closed) throw new ShardflakeError('INVALID_ARGUMENT', 'the router is closed');
        // While the catalog is down only the reconnect timer asks it: operations serve from the last map at once.
        if (down && state) return state;
        try {
          await refreshOnce();
        } catch (error) {
          if (!state) {
            stale = true;
            throw error;
          }
          enterOutage(error);
        }
      }
      return state;
    },

    async reload() {
      stale = true;
      // Asked for by the application (router.refresh()): the whole map, whatever the versions say.
      await refreshOnce(true);
      if (down) {
        down = undefined;
        options.emit?.({ type: 'catalog-up', server: options.catalogServer });
      }
      return state as MapState;
    },

    markStale() {
      stale = true;
    },

    newerMap(version, ms) {
      if (state && state.version > version) return Promise.resolve('map');
      return new Promise((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          mapWaiters.delete(wake);
          resolve('map');
        };
        const timer = setTimeout(() => {
          mapWaiters.delete(wake);
          resolve('timeout');
        }, ms);
        mapWaiters.set(wake, version);
      });
    },

    async close() {
      closed = true;
      clearTimeout(reconnectTimer);
      for (const wake of [...mapWaiters.keys()]) wake();
      await connection.close();
    },
  };
  return cache;
}

/** Where a shard lives in `map`; UNKNOWN_SHARD when the map has no such shard. */
export function placementIn(map: MapState, shard: number): ShardPlacement {
  const p = Number.isInteger(shard) ? map.shards[shard] : undefined;
  if (!p) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      Number.isInteger(shard) && shard >= 0 && shard < map.logicalShards
        ? `shard ${shard} is not in the map yet; finish cluster init`
        : `shard ${shown(shard)} is outside the cluster's ${map.logicalShards} logical shards`,
    );
  }
  return p;
}

/**
 * The shard named in an id's shard bits. Where types cannot reach (JavaScript callers, a value cast to an id), the
 * bits are checked: an id whose shard bits name a shard outside the cluster is not an id of this cluster — most
 * often a shard key or another system's number passed as an id — and routing it would read nothing or fail later.
 */
export function shardOfIdIn(map: MapState, id: ShardflakeId): number {
  if (typeof id !== 'bigint') throw new ShardflakeError('INVALID_ID', `ids are bigint, not ${typeof id}`);
  if (id < 0n)
    throw new ShardflakeError('INVALID_ID', `${id} is not an id of this cluster: ids are not negative`);
  // An id the adopted source made carries no shard bits: taken as a root id, it routes as the key it was.
  if (isOldId(id, map.adoption?.oldIdsBelow)) return shardOfOldRootId(map.logicalShards, id);
  const shard = Number((id >> BigInt(map.shardField.shift)) & map.shardField.max);
  if (shard >= map.logicalShards)
    throw new ShardflakeError(
      'INVALID_ID',
      `${id} is not an id of this cluster: its shard bits name shard ${shard}, and the cluster has ${map.logicalShards} logical shards (a shard key passed as an id?)`,
    );
  return shard;
}

import type pg from 'pg';
import { isShardflakeError, ShardflakeError } from '../errors.js';
import { type Layout, type LayoutField, resolveLayout, withEpoch } from '../ids/layout.js';
import { connect, createPool, wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import { MAP_CHANNEL, readClusterInfo, readShardMap, type ShardPlacement } from './catalog.js';
import type { ClusterConfig } from './config.js';
import { type ShardKey, shardForKey } from './shard-key.js';

/**
 * The router: shard key → logical shard → physical server, over one `pg` pool per server.
 *
 * It reads the shard map from the catalog once, then keeps it current by LISTENing on `shardflake_map`: a
 * notification newer than its map marks the map stale and every operation waits for the refresh, so the router
 * never acts on a map older than the catalog's (if the LISTEN connection drops, the next operation reconnects
 * and re-reads the map first). No operation makes a catalog round trip of its own, and each statement's text is
 * built once per (schema, table, columns) and cached, which keeps routing within a few percent of plain `pg`.
 *
 * Writes during a shard move: a write that reaches a fenced copy (SQLSTATE SF001, raised by the move's fence) or
 * fails on a shard in state `moving` retries for up to `writeRetryMs` (10 s), so a cutover pauses writes instead
 * of failing them. Between attempts it waits for whichever comes first: the NOTIFY of a newer map (the cutover's
 * catalog switch, usually a few ms after the fence commits) or a backoff timeout (10, 20, 40 … 200 ms, after which
 * the map is re-read anyway, in case a notification was lost). So a retry runs as soon as the new map is known,
 * not at the next tick of a sleep.
 */
export interface RouterOptions {
  /** Connections per server pool (default 10). */
  poolSize?: number;
  /** How long a write keeps retrying on a fenced or moving shard (default 10 000 ms). */
  writeRetryMs?: number;
  /** Listen for map changes (default true). */
  listen?: boolean;
  /** Called after each map refresh. */
  onMapChange?: (version: bigint) => void;
  /** First wait between write retries when no newer map arrives (default 10 ms); it doubles up to the maximum. */
  retryBackoffMs?: number;
  /** Longest wait between write retries (default 200 ms). */
  maxRetryBackoffMs?: number;
  /** Called before each write retry, once the wait is over. */
  onRetry?: (retry: WriteRetry) => void;
}

export interface WriteRetry {
  shard: number;
  /** 1 for the first retry. */
  attempt: number;
  reason: 'fenced' | 'moving';
  /** What ended the wait: a newer map (from NOTIFY or another refresh), or the backoff timeout. */
  woke: 'map' | 'timeout';
}

export type Row = Record<string, unknown>;

export interface InsertOptions {
  /** Shard key (a user id, a string…); or give `shard` directly. */
  key?: ShardKey;
  shard?: number;
}

export interface FeedOptions {
  /** Column the keys are matched against (e.g. `user_id`); leave out to read whole shards. */
  column?: string;
  /** Shard keys whose rows to read; each goes to its shard. */
  keys?: readonly ShardKey[];
  /**
   * The keys are ids made by this cluster (e.g. user ids), and each key's rows live on the shard named in its id
   * bits — rows colocated with their parent, as Instagram keeps photos on their user's shard. Default: keys are
   * routed like insert keys (modulo / hash).
   */
  keysAreIds?: boolean;
  /** Shards to read when no keys are given (default: all). */
  shards?: readonly number[];
  /** Rows per page (default 20). */
  limit?: number;
  /** Keyset pagination: only ids below this (newest first) — pass the previous page's `next`. */
  before?: bigint;
}

export interface FeedPage {
  rows: Row[];
  /** The `before` of the next page, or null when this page was the last. */
  next: bigint | null;
}

export interface Router {
  readonly mapVersion: bigint;
  readonly logicalShards: number;
  readonly layout: Layout;
  shardFor(key: ShardKey): number;
  shardOfId(id: bigint): number;
  placement(shard: number): ShardPlacement;
  insert(table: string, row: Row, options: InsertOptions): Promise<bigint>;
  get(table: string, id: bigint): Promise<Row | null>;
  update(table: string, id: bigint, changes: Row): Promise<boolean>;
  delete(table: string, id: bigint): Promise<boolean>;
  feed(table: string, options: FeedOptions): Promise<FeedPage>;
  /** Re-reads the map from the catalog. */
  refresh(): Promise<void>;
  close(): Promise<void>;
}

export const FENCED_SQLSTATE = 'SF001';
const DEFAULTS = {
  poolSize: 10,
  writeRetryMs: 10_000,
  listen: true,
  retryBackoffMs: 10,
  maxRetryBackoffMs: 200,
};

interface MapState {
  version: bigint;
  logicalShards: number;
  layout: Layout;
  shardField: LayoutField;
  shards: ShardPlacement[];
}

export async function createRouter(
  config: Pick<ClusterConfig, 'servers' | 'catalog'>,
  options: RouterOptions = {},
): Promise<Router> {
  const opts = { ...DEFAULTS, ...options };
  const catalogUrl = config.servers[config.catalog];
  if (!catalogUrl)
    throw new ShardflakeError('UNKNOWN_SERVER', `catalog server ${config.catalog} is not in the config`);
  const catalogPool = createPool(catalogUrl, { max: 2, applicationName: 'shardflake router' });
  const pools = new Map<string, pg.Pool>();
  const sqlCache = new Map<string, string>();
  let state: MapState | undefined;
  let stale = true;
  let refreshing: Promise<void> | undefined;
  let listener: pg.Client | undefined;
  let closed = false;
  // Writes waiting to retry: each is woken by the first map newer than the one its attempt used.
  const mapWaiters = new Map<() => void, bigint>();

  /** Resolves 'map' once the loaded map is newer than `version`, or 'timeout' after `ms`. */
  function newerMap(version: bigint, ms: number): Promise<'map' | 'timeout'> {
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
  }

  function poolFor(server: string): pg.Pool {
    let pool = pools.get(server);
    if (!pool) {
      const url = config.servers[server];
      if (!url)
        throw new ShardflakeError(
          'UNKNOWN_SERVER',
          `the shard map names server ${server}, which the config does not define`,
        );
      pool = createPool(url, { max: opts.poolSize, applicationName: 'shardflake router' });
      pools.set(server, pool);
    }
    return pool;
  }

  async function load(): Promise<void> {
    try {
      const info = await readClusterInfo(catalogPool);
      if (!info)
        throw new ShardflakeError(
          'INVALID_CONFIG',
          `no cluster on catalog server ${config.catalog}; run cluster init first`,
        );
      const map = await readShardMap(catalogPool);
      const layout = withEpoch(resolveLayout(info.layout), info.epochMs);
      const shardField = layout.fields.find((f) => f.kind === 'shard');
      if (!shardField)
        throw new ShardflakeError('INVALID_LAYOUT', `layout ${info.layout} has no shard field`);
      const shards: ShardPlacement[] = [];
      for (const s of map.shards) shards[s.shard] = s;
      state = { version: map.version, logicalShards: info.logicalShards, layout, shardField, shards };
      opts.onMapChange?.(map.version);
      for (const [wake, version] of mapWaiters) if (map.version > version) wake();
    } catch (error) {
      throw wrapPgError(error);
    }
  }

  async function listen(): Promise<void> {
    if (!opts.listen || closed) return;
    const client = await connect(catalogUrl as string, { applicationName: 'shardflake router listen' });
    client.on('notification', (msg) => {
      if (msg.channel !== MAP_CHANNEL) return;
      const version = msg.payload ? BigInt(msg.payload) : undefined;
      if (!state || version === undefined || version > state.version) {
        stale = true;
        // Refresh at once, so the next operation rarely has to wait; errors surface on that operation instead.
        fresh().catch(() => {});
      }
    });
    const lost = () => {
      if (listener === client) {
        listener = undefined;
        stale = true;
      }
    };
    client.on('error', lost);
    client.on('end', lost);
    await client.query(`LISTEN ${quoteIdent(MAP_CHANNEL)}`);
    listener = client;
  }

  /** Waits until the map is at least as new as the catalog's last announced version. */
  async function fresh(): Promise<MapState> {
    while (stale || !state) {
      if (closed) throw new ShardflakeError('INVALID_ARGUMENT', 'the router is closed');
      if (!refreshing) {
        refreshing = (async () => {
          // Clear the flag first: a notification that arrives during the read sets it again.
          stale = false;
          if (opts.listen && !listener) await listen();
          await load();
        })().finally(() => {
          refreshing = undefined;
        });
      }
      try {
        await refreshing;
      } catch (error) {
        stale = true;
        throw error;
      }
    }
    return state;
  }

  function placementIn(map: MapState, shard: number): ShardPlacement {
    const p = map.shards[shard];
    if (!p) {
      throw new ShardflakeError(
        'UNKNOWN_SHARD',
        shard >= 0 && shard < map.logicalShards
          ? `shard ${shard} is not in the map yet; finish cluster init`
          : `shard ${shard} is outside the cluster's ${map.logicalShards} logical shards`,
      );
    }
    return p;
  }

  function shardOfIdIn(map: MapState, id: bigint): number {
    if (typeof id !== 'bigint') throw new ShardflakeError('INVALID_ID', `ids are bigint, not ${typeof id}`);
    return Number((id >> BigInt(map.shardField.shift)) & map.shardField.max);
  }

  function cached(key: string, build: () => string): string {
    let text = sqlCache.get(key);
    if (text === undefined) {
      text = build();
      sqlCache.set(key, text);
    }
    return text;
  }

  /** Runs a statement on the shard's server; writes retry on a fenced copy or a moving shard. */
  async function run(
    shardOf: (map: MapState) => number,
    statement: (schema: string) => string,
    values: unknown[],
    write: boolean,
  ): Promise<pg.QueryResult> {
    const deadline = performance.now() + (write ? opts.writeRetryMs : 0);
    let backoff = opts.retryBackoffMs;
    for (let attempt = 1; ; attempt++) {
      const map = await fresh();
      const p = placementIn(map, shardOf(map));
      try {
        return await poolFor(p.server).query(statement(p.schema), values);
      } catch (error) {
        const fenced = (error as { code?: string }).code === FENCED_SQLSTATE;
        const retriable = write && (fenced || (p.state === 'moving' && !isShardflakeError(error)));
        if (!retriable) throw wrapPgError(error, config.servers[p.server]);
        if (performance.now() >= deadline) {
          throw new ShardflakeError(
            'SHARD_FENCED',
            `a write to shard ${p.shard} kept reaching a fenced or moving copy for ${opts.writeRetryMs} ms`,
            { sqlState: (error as { code?: string }).code, cause: error },
          );
        }
        const woke = await newerMap(
          map.version,
          Math.min(backoff, Math.max(0, deadline - performance.now())),
        );
        // No newer map in time: re-read it anyway (a notification may have been lost, or LISTEN is off).
        if (woke === 'timeout') stale = true;
        backoff = Math.min(backoff * 2, opts.maxRetryBackoffMs);
        opts.onRetry?.({ shard: p.shard, attempt, reason: fenced ? 'fenced' : 'moving', woke });
      }
    }
  }

  const router: Router = {
    get mapVersion() {
      return state?.version ?? 0n;
    },
    get logicalShards() {
      return (state as MapState).logicalShards;
    },
    get layout() {
      return (state as MapState).layout;
    },
    shardFor: (key) => shardForKey(key, (state as MapState).logicalShards),
    shardOfId: (id) => shardOfIdIn(state as MapState, id),
    placement: (shard) => placementIn(state as MapState, shard),

    async insert(table, row, options) {
      const columns = Object.keys(row);
      const values = columns.map((c) => row[c]);
      const shardOf = (map: MapState) =>
        options.shard ??
        (options.key !== undefined ? shardForKey(options.key, map.logicalShards) : Number.NaN);
      if (options.shard === undefined && options.key === undefined) {
        throw new ShardflakeError(
          'INVALID_ARGUMENT',
          'insert needs a shard key ({ key }) or a shard ({ shard })',
        );
      }
      const result = await run(
        shardOf,
        (schema) =>
          cached(`i\0${schema}\0${table}\0${columns.join('\0')}`, () => {
            const target = `${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')}`;
            if (columns.length === 0) return `INSERT INTO ${target} DEFAULT VALUES RETURNING id`;
            const names = columns.map((c) => quoteIdent(c, 'column')).join(', ');
            const params = columns.map((_, i) => `$${i + 1}`).join(', ');
            return `INSERT INTO ${target} (${names}) VALUES (${params}) RETURNING id`;
          }),
        values,
        true,
      );
      return (result.rows[0] as { id: bigint }).id;
    },

    async get(table, id) {
      const result = await run(
        (map) => shardOfIdIn(map, id),
        (schema) =>
          cached(
            `g\0${schema}\0${table}`,
            () => `SELECT * FROM ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} WHERE id = $1`,
          ),
        [id],
        false,
      );
      return (result.rows[0] as Row | undefined) ?? null;
    },

    async update(table, id, changes) {
      const columns = Object.keys(changes);
      if (columns.length === 0)
        throw new ShardflakeError('INVALID_ARGUMENT', 'update needs at least one column to change');
      const result = await run(
        (map) => shardOfIdIn(map, id),
        (schema) =>
          cached(`u\0${schema}\0${table}\0${columns.join('\0')}`, () => {
            const sets = columns.map((c, i) => `${quoteIdent(c, 'column')} = $${i + 2}`).join(', ');
            return `UPDATE ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} SET ${sets} WHERE id = $1`;
          }),
        [id, ...columns.map((c) => changes[c])],
        true,
      );
      return (result.rowCount ?? 0) > 0;
    },

    async delete(table, id) {
      const result = await run(
        (map) => shardOfIdIn(map, id),
        (schema) =>
          cached(
            `d\0${schema}\0${table}`,
            () => `DELETE FROM ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} WHERE id = $1`,
          ),
        [id],
        true,
      );
      return (result.rowCount ?? 0) > 0;
    },

    async feed(table, options) {
      const limit = options.limit ?? 20;
      if (!Number.isInteger(limit) || limit < 1)
        throw new ShardflakeError('INVALID_ARGUMENT', 'feed limit must be a positive whole number');
      const map = await fresh();
      quoteIdent(table, 'table');
      // Which shards, and which keys on each.
      const keysByShard = new Map<number, ShardKey[]>();
      if (options.keys) {
        if (!options.column)
          throw new ShardflakeError('INVALID_ARGUMENT', 'feed with keys needs the column they match');
        for (const key of options.keys) {
          const shard = options.keysAreIds
            ? shardOfIdIn(map, BigInt(key as bigint))
            : shardForKey(key, map.logicalShards);
          const list = keysByShard.get(shard);
          if (list) list.push(key);
          else keysByShard.set(shard, [key]);
        }
      } else {
        const shards = options.shards ?? Array.from({ length: map.logicalShards }, (_, i) => i);
        for (const shard of shards) keysByShard.set(shard, []);
      }
      const byServer = new Map<string, { schema: string; keys: ShardKey[] }[]>();
      for (const [shard, keys] of keysByShard) {
        const p = placementIn(map, shard);
        const list = byServer.get(p.server);
        if (list) list.push({ schema: p.schema, keys });
        else byServer.set(p.server, [{ schema: p.schema, keys }]);
      }
      // One query per server: each shard's newest rows (index scan on the id primary key), then the server's top.
      const pages = await Promise.all(
        [...byServer].map(async ([server, parts]) => {
          const values: unknown[] = [limit];
          if (options.before !== undefined) values.push(options.before);
          const beforeClause = options.before !== undefined ? ' AND id < $2' : '';
          const selects = parts.map(({ schema, keys }) => {
            let where = 'true';
            if (options.column) {
              values.push(keys);
              where = `${quoteIdent(options.column, 'column')} = ANY($${values.length})`;
            }
            return `(SELECT * FROM ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} WHERE ${where}${beforeClause} ORDER BY id DESC LIMIT $1)`;
          });
          const sql = `SELECT * FROM (${selects.join(' UNION ALL ')}) AS page ORDER BY id DESC LIMIT $1`;
          try {
            return (await poolFor(server).query(sql, values)).rows as Row[];
          } catch (error) {
            throw wrapPgError(error, config.servers[server]);
          }
        }),
      );
      // k-way merge of the servers' pages, each already newest first.
      const heads = pages.map(() => 0);
      const rows: Row[] = [];
      while (rows.length < limit) {
        let best = -1;
        for (let i = 0; i < pages.length; i++) {
          const row = pages[i]?.[heads[i] as number];
          if (
            row &&
            (best === -1 || (row.id as bigint) > (pages[best]?.[heads[best] as number]?.id as bigint))
          )
            best = i;
        }
        if (best === -1) break;
        rows.push(pages[best]?.[heads[best] as number] as Row);
        heads[best] = (heads[best] as number) + 1;
      }
      const last = rows[rows.length - 1];
      return { rows, next: rows.length === limit && last ? (last.id as bigint) : null };
    },

    async refresh() {
      stale = true;
      await fresh();
    },

    async close() {
      closed = true;
      for (const wake of [...mapWaiters.keys()]) wake();
      await listener?.end().catch(() => {});
      listener = undefined;
      await Promise.all([...pools.values(), catalogPool].map((p) => p.end().catch(() => {})));
    },
  };
  try {
    await fresh();
  } catch (error) {
    await router.close();
    throw error;
  }
  return router;
}

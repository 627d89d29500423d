/*
 * catalog/: Every statement on the catalog (schema `shardflake` on the catalog server), one file per topic: the
 * cluster row and the shard map, moves, migrations, lookups, leases, cross-server transaction decisions, the
 * servers and which of them hold a reference copy. No other folder writes catalog SQL (a house test checks it).
 *
 * May import: errors, postgres, config.
 */
import { ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * The catalog: the shard map stored in Postgres itself, in schema `shardflake` on the config's catalog server (no
 * ZooKeeper). One row per logical shard says which physical server and schema hold it. `map_version` goes up by
 * one on every change, and each change is announced on the NOTIFY channel below in the same transaction, so a
 * router learns of it at commit and can refuse to act on a map older than the catalog's.
 *
 * Every statement on the `shardflake` schema lives in this folder, one file per topic (shards.ts: the cluster row
 * and the shard map; moves.ts: the move records; leases.ts: worker leases), as named functions: the CLI, the
 * router, the dashboard and the move engine call them and write no catalog SQL of their own.
 */
export const CATALOG_SCHEMA = 'shardflake';
/** The channel the catalog NOTIFYs on every change of the shard map; routers LISTEN on it. */
export const MAP_CHANNEL = 'shardflake_map';

/**
 * The advisory-lock key space of the per-shard lock (fence/shard-lock.ts): keys (class, shard); (class, -1)
 * serializes the catalog's own setup. "_MOV".
 */
export const SHARD_LOCK_CLASS = 0x5f4d4f56;

/** Lifecycle of a logical shard in the map. `moving` shards still serve from `server` until cutover. */
export const SHARD_STATES = ['active', 'moving'] as const;
/** One of `SHARD_STATES`. */
export type ShardState = (typeof SHARD_STATES)[number];

/** Where one logical shard lives: its server, its schema there, and its state. */
export interface ShardPlacement {
  /** The logical shard number, 0 to logicalShards − 1. */
  shard: number;
  /** The config's name of the server whose database holds the shard now (the source while it is `moving`). */
  server: string;
  /** The schema on that server holding the shard's tables, such as `shard_0042`. */
  schema: string;
  /** `active`, or `moving` while an online move copies it (it still serves from `server` until cutover). */
  state: ShardState;
}

/** The catalog's shard map: its version (raised on every change) and every shard's placement. */
export interface ShardMap {
  /** The catalog's map version when read: 0 before init, then one higher after every change of the map. */
  version: bigint;
  /** How many logical shards the cluster has (0 when the cluster row is missing). */
  logicalShards: number;
  /** Every shard's placement, ordered by shard number. */
  shards: ShardPlacement[];
}

/**
 * Version of the catalog's own DDL. Every statement below is idempotent; a catalog made by an older version gets
 * it all again from `upgradeCatalog` (init, and migrate when its role owns the catalog), which records the new
 * version.
 *
 * 2: the index on `shards.changed_in_version`, so a router's refresh reads the changed shards (readShardChanges)
 *    in time proportional to them, not to the map.
 */
export const CATALOG_SQL_VERSION = 2;

/**
 * `shards.changed_in_version`: the map version that last changed the row's placement (server or state), written in
 * the transaction that raises the map version (setShardsState, announceShards), so a router at version v learns
 * everything that changed since from the rows with a higher one. A shard `cluster init` recorded and has not
 * announced yet holds -1 (UNANNOUNCED): announceShards gives it the version that makes it known.
 */
const UNANNOUNCED = -1;

export function catalogSql(): string {
  return `
CREATE SCHEMA IF NOT EXISTS shardflake;
CREATE TABLE IF NOT EXISTS shardflake.cluster (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  map_version bigint NOT NULL DEFAULT 0,
  logical_shards integer NOT NULL CHECK (logical_shards BETWEEN 1 AND 8192),
  epoch_ms bigint NOT NULL,
  catalog_sql_version integer NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS shardflake.shards (
  shard integer PRIMARY KEY CHECK (shard >= 0 AND shard < 8192),
  server text NOT NULL,
  schema_name text NOT NULL UNIQUE,
  state text NOT NULL DEFAULT 'active' CHECK (state IN (${SHARD_STATES.map((s) => `'${s}'`).join(', ')})),
  changed_in_version bigint NOT NULL DEFAULT 0
);
-- Added by the cluster module: the layout and schema naming the cluster was created with, and each shard's schema
-- version as last seen by cluster migrate (the truth lives in the shard's own _shardflake_migrations table).
ALTER TABLE shardflake.cluster ADD COLUMN IF NOT EXISTS layout text NOT NULL DEFAULT 'instagram';
ALTER TABLE shardflake.cluster ADD COLUMN IF NOT EXISTS schema_prefix text NOT NULL DEFAULT 'shard_';
ALTER TABLE shardflake.shards ADD COLUMN IF NOT EXISTS schema_version integer NOT NULL DEFAULT 0;
ALTER TABLE shardflake.shards ADD COLUMN IF NOT EXISTS last_error text;
CREATE INDEX IF NOT EXISTS shards_changed_in_version ON shardflake.shards (changed_in_version);`;
}

export async function installCatalog(client: Queryable): Promise<void> {
  await client.query(catalogSql());
}

/**
 * Brings a catalog made by an older shardflake to CATALOG_SQL_VERSION (its DDL again, then the version recorded);
 * a catalog already there costs one read and takes no lock. Needs the cluster table. True when it upgraded.
 */
export async function upgradeCatalog(client: Queryable): Promise<boolean> {
  const { rows } = await client.query('SELECT catalog_sql_version FROM shardflake.cluster WHERE singleton');
  const version = (rows[0] as { catalog_sql_version: number } | undefined)?.catalog_sql_version;
  if (version === undefined || version >= CATALOG_SQL_VERSION) return false;
  try {
    await client.query(catalogSql());
    await client.query('UPDATE shardflake.cluster SET catalog_sql_version = $1 WHERE singleton', [
      CATALOG_SQL_VERSION,
    ]);
  } catch (error) {
    // A role that only reads the catalog (docs/security.md: migrate needs no more) leaves the upgrade to the next
    // run by its owner (cluster init): what version 2 adds makes routers' reads cheaper and changes nothing else.
    if ((error as { code?: string }).code === '42501') return false;
    throw error;
  }
  return true;
}

/** Reads the shard map from the catalog: its version and every shard's server, schema and state. */
export async function readShardMap(client: Queryable): Promise<ShardMap> {
  const cluster = await client.query(
    'SELECT map_version, logical_shards FROM shardflake.cluster WHERE singleton',
  );
  const shards = await client.query(
    'SELECT shard, server, schema_name, state FROM shardflake.shards ORDER BY shard',
  );
  const row = cluster.rows[0] as { map_version: bigint; logical_shards: number } | undefined;
  return {
    version: row ? BigInt(row.map_version) : 0n,
    logicalShards: row?.logical_shards ?? 0,
    shards: shards.rows.map(
      (r: { shard: number; server: string; schema_name: string; state: ShardState }) => ({
        shard: r.shard,
        server: r.server,
        schema: r.schema_name,
        state: r.state,
      }),
    ),
  };
}

/** What changed in the map after a version: the catalog's version now and the placements changed since. */
export interface ShardChanges {
  /** The catalog's map version when read. */
  version: bigint;
  /** The shards whose placement changed in a version above the one asked about, ordered by shard number. */
  shards: ShardPlacement[];
}

/**
 * The map's changes after version `since`, in one statement (one snapshot: the version and the rows agree). A
 * writer sets `changed_in_version` in the transaction that raises the version, and versions commit in order (each
 * raise holds the cluster row's lock to its commit), so the rows above `since` are every change a map at `since`
 * lacks. Reads only those rows, through the index on `changed_in_version`.
 */
export async function readShardChanges(client: Queryable, since: bigint): Promise<ShardChanges> {
  const { rows } = await client.query(
    `SELECT c.map_version, s.shard, s.server, s.schema_name, s.state
       FROM shardflake.cluster c
       LEFT JOIN shardflake.shards s ON s.changed_in_version > $1
      WHERE c.singleton
      ORDER BY s.shard`,
    [since.toString()],
  );
  const first = rows[0] as { map_version: bigint } | undefined;
  return {
    version: first ? BigInt(first.map_version) : 0n,
    shards: (
      rows as { shard: number | null; server: string; schema_name: string; state: ShardState }[]
    ).flatMap((r) =>
      r.shard === null ? [] : [{ shard: r.shard, server: r.server, schema: r.schema_name, state: r.state }],
    ),
  };
}

/**
 * Makes the shards `cluster init` recorded known to routers: raises the map version and gives every shard not
 * announced yet (this run's, and those of an earlier run that stopped before this step) that version, in one
 * transaction. Returns the new version, or null (changing nothing) when no shard waited.
 */
export async function announceShards(client: Queryable): Promise<bigint | null> {
  await client.query('BEGIN');
  try {
    const waiting = await client.query(
      `SELECT 1 FROM shardflake.shards WHERE changed_in_version = ${UNANNOUNCED} LIMIT 1`,
    );
    if (waiting.rowCount === 0) {
      await client.query('ROLLBACK');
      return null;
    }
    const version = await bumpMapVersion(client);
    await client.query(
      `UPDATE shardflake.shards SET changed_in_version = $1 WHERE changed_in_version = ${UNANNOUNCED}`,
      [version.toString()],
    );
    await client.query('COMMIT');
    return version;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/**
 * Bumps the map version and notifies routers. Call inside the transaction that changed the map, so the new version
 * and the NOTIFY become visible together at commit.
 */
export async function bumpMapVersion(client: Queryable): Promise<bigint> {
  const { rows } = await client.query(
    'UPDATE shardflake.cluster SET map_version = map_version + 1 WHERE singleton RETURNING map_version',
  );
  const version = BigInt((rows[0] as { map_version: bigint }).map_version);
  await client.query('SELECT pg_notify($1, $2)', [MAP_CHANNEL, version.toString()]);
  return version;
}

/** The cluster row: what the cluster was created with. */
export interface ClusterInfo {
  /** The shard map's version when read, raised by one on every change of the map. */
  mapVersion: bigint;
  /** How many logical shards the cluster was created with; fixed for its life. */
  logicalShards: number;
  /** The ids' epoch the cluster was created with, in milliseconds since 1970. */
  epochMs: number;
  /** The name of the id layout preset the cluster was created with, such as `instagram`. */
  layout: string;
  /** The prefix of the shard schemas the cluster was created with, such as `shard_`. */
  schemaPrefix: string;
}

/** The cluster row, or null before `cluster init` has written it (or before the catalog exists). */
export async function readClusterInfo(client: Queryable): Promise<ClusterInfo | null> {
  const exists = await client.query("SELECT to_regclass('shardflake.cluster') IS NOT NULL AS ok");
  if (!(exists.rows[0] as { ok: boolean }).ok) return null;
  const { rows } = await client.query(
    'SELECT map_version, logical_shards, epoch_ms, layout, schema_prefix FROM shardflake.cluster WHERE singleton',
  );
  const row = rows[0] as
    | { map_version: bigint; logical_shards: number; epoch_ms: bigint; layout: string; schema_prefix: string }
    | undefined;
  if (!row) return null;
  return {
    mapVersion: BigInt(row.map_version),
    logicalShards: row.logical_shards,
    epochMs: Number(row.epoch_ms),
    layout: row.layout,
    schemaPrefix: row.schema_prefix,
  };
}

export interface ShardRecord {
  shard: number;
  server: string;
  schema: string;
  schemaVersion: number;
}

/**
 * Adds created shards to the map (one statement for any number of shards); shards already there are kept. They
 * are unannounced until announceShards raises the map version for them.
 */
export async function recordShards(client: Queryable, records: readonly ShardRecord[]): Promise<void> {
  if (records.length === 0) return;
  await client.query(
    `INSERT INTO shardflake.shards (shard, server, schema_name, schema_version, changed_in_version)
     SELECT *, ${UNANNOUNCED} FROM unnest($1::int[], $2::text[], $3::text[], $4::int[])
     ON CONFLICT (shard) DO NOTHING`,
    [
      records.map((r) => r.shard),
      records.map((r) => r.server),
      records.map((r) => r.schema),
      records.map((r) => r.schemaVersion),
    ],
  );
}

/** Each shard's schema version and last migration error as the catalog last recorded them. */
export async function readShardVersions(
  client: Queryable,
): Promise<Map<number, { schemaVersion: number; lastError: string | null }>> {
  const { rows } = await client.query('SELECT shard, schema_version, last_error FROM shardflake.shards');
  return new Map(
    rows.map((r: { shard: number; schema_version: number; last_error: string | null }) => [
      r.shard,
      { schemaVersion: r.schema_version, lastError: r.last_error },
    ]),
  );
}

/** Writes the cluster row once (a rerun keeps the first one); `cluster init` then checks it against the config. */
export async function writeClusterRow(
  client: Queryable,
  row: { logicalShards: number; epochMs: number; layout: string; schemaPrefix: string },
): Promise<void> {
  await client.query(
    `INSERT INTO shardflake.cluster (logical_shards, epoch_ms, catalog_sql_version, layout, schema_prefix)
     VALUES ($1, $2, ${CATALOG_SQL_VERSION}, $3, $4) ON CONFLICT (singleton) DO NOTHING`,
    [row.logicalShards, row.epochMs, row.layout, row.schemaPrefix],
  );
}

/**
 * Rewrites the cluster row while the catalog records no shard (a first init that failed before making any, rerun
 * with a corrected config). False, changing nothing, once a shard is recorded: then the row is the cluster's.
 */
export async function rewriteClusterRowWhileNoShard(
  client: Queryable,
  row: { logicalShards: number; epochMs: number; layout: string; schemaPrefix: string },
): Promise<boolean> {
  const { rowCount } = await client.query(
    `UPDATE shardflake.cluster SET logical_shards = $1, epoch_ms = $2, layout = $3, schema_prefix = $4
      WHERE NOT EXISTS (SELECT 1 FROM shardflake.shards)`,
    [row.logicalShards, row.epochMs, row.layout, row.schemaPrefix],
  );
  return rowCount === 1;
}

/**
 * The cluster's bound below which ids are old (rows adopted from a live database keep their bigserial ids, which
 * name no shard: postgres/id-shard-rule.ts), or null when it keeps none. The column exists only once the bound was
 * recorded, so it is read through the row's JSON (no error on a catalog without it).
 */
export async function readOldIdsBelow(client: Queryable): Promise<bigint | null> {
  const { rows } = await client.query(
    "SELECT to_jsonb(c) ->> 'old_ids_below' AS bound FROM shardflake.cluster c WHERE singleton",
  );
  const bound = (rows[0] as { bound: string | null } | undefined)?.bound;
  return bound === null || bound === undefined ? null : BigInt(bound);
}

/**
 * Records the cluster's old-id bound (adoption calls this before its rows are copied; null removes it). Shards get
 * the rule with the bound from the next `cluster migrate` (or at once from `installIdChecks`).
 */
export async function recordOldIdsBelow(client: Queryable, bound: bigint | null): Promise<void> {
  await client.query('ALTER TABLE shardflake.cluster ADD COLUMN IF NOT EXISTS old_ids_below bigint');
  await client.query('UPDATE shardflake.cluster SET old_ids_below = $1 WHERE singleton', [
    bound === null ? null : bound.toString(),
  ]);
}

/** Records a shard's schema version and last migration error (null when it migrated cleanly). */
export async function recordShardVersion(
  client: Queryable,
  shard: number,
  version: number,
  error: string | null,
): Promise<void> {
  await client.query('UPDATE shardflake.shards SET schema_version = $2, last_error = $3 WHERE shard = $1', [
    shard,
    version,
    error,
  ]);
}

/** Where the map places one shard now; throws UNKNOWN_SHARD when the map lacks it. */
export async function readPlacement(client: Queryable, shard: number): Promise<ShardPlacement> {
  const found = await readPlacements(client, [shard]);
  return found.get(shard) as ShardPlacement;
}

/** Where the map places one shard now, or null when the map lacks it. */
export async function findPlacement(client: Queryable, shard: number): Promise<ShardPlacement | null> {
  return (await readPlacements(client, [shard]).catch(() => null))?.get(shard) ?? null;
}

/** The map's placement of each shard, in one query; throws UNKNOWN_SHARD naming the shards the map lacks. */
export async function readPlacements(
  client: Queryable,
  shards: readonly number[],
): Promise<Map<number, ShardPlacement>> {
  const { rows } = await client.query(
    'SELECT shard, server, schema_name, state FROM shardflake.shards WHERE shard = ANY($1::int[])',
    [shards],
  );
  const found = new Map(
    (rows as { shard: number; server: string; schema_name: string; state: ShardState }[]).map((r) => [
      r.shard,
      { shard: r.shard, server: r.server, schema: r.schema_name, state: r.state },
    ]),
  );
  const missing = shards.filter((n) => !found.has(n));
  if (missing.length > 0) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      `shard ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not in the shard map; run cluster init first`,
    );
  }
  return found;
}

/**
 * Sets the state of `shards` (and, with `server`, places them there) under a new map version; returns it. Call
 * inside the transaction that makes the change, so routers learn it at commit.
 */
export async function setShardsState(
  client: Queryable,
  shards: readonly number[],
  state: ShardState,
  server?: string,
): Promise<bigint> {
  const version = await bumpMapVersion(client);
  await client.query(
    'UPDATE shardflake.shards SET state = $2, server = coalesce($3, server), changed_in_version = $4 WHERE shard = ANY($1::int[])',
    [shards, state, server ?? null, version],
  );
  return version;
}

import type { Queryable } from '../postgres/connect.js';

/**
 * The catalog: the shard map stored in Postgres itself, in schema `shardflake` on the config's catalog server (no
 * ZooKeeper). One row per logical shard says which physical server and schema hold it. `map_version` goes up by
 * one on every change, and each change is announced on the NOTIFY channel below in the same transaction, so a
 * router learns of it at commit and can refuse to act on a map older than the catalog's.
 *
 * Other modules keep their own tables in the same schema (leases, moves, migrations), each created by its module.
 */
export const CATALOG_SCHEMA = 'shardflake';
export const MAP_CHANNEL = 'shardflake_map';

/** Lifecycle of a logical shard in the map. `moving` shards still serve from `server` until cutover. */
export const SHARD_STATES = ['active', 'moving'] as const;
export type ShardState = (typeof SHARD_STATES)[number];

export interface ShardPlacement {
  shard: number;
  server: string;
  schema: string;
  state: ShardState;
}

export interface ShardMap {
  version: bigint;
  logicalShards: number;
  shards: ShardPlacement[];
}

/** Version of the catalog's own DDL. Every statement below is idempotent. */
export const CATALOG_SQL_VERSION = 1;

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
ALTER TABLE shardflake.shards ADD COLUMN IF NOT EXISTS last_error text;`;
}

export async function installCatalog(client: Queryable): Promise<void> {
  await client.query(catalogSql());
}

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
  mapVersion: bigint;
  logicalShards: number;
  epochMs: number;
  layout: string;
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

/** Adds created shards to the map (one statement for any number of shards); shards already there are kept. */
export async function recordShards(client: Queryable, records: readonly ShardRecord[]): Promise<void> {
  if (records.length === 0) return;
  await client.query(
    `INSERT INTO shardflake.shards (shard, server, schema_name, schema_version)
     SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::int[])
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

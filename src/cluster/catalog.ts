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
);`;
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
    shards: shards.rows.map((r: { shard: number; server: string; schema_name: string; state: ShardState }) => ({
      shard: r.shard,
      server: r.server,
      schema: r.schema_name,
      state: r.state,
    })),
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

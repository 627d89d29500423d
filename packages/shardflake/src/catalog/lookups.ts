import type { LookupDefinition, LookupNormalize } from '../config/lookups.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * The catalog's record of lookups (schema `shardflake` on the catalog server): which lookups exist, whether they
 * are built (`ready`: routers may read them) or being built by `cluster migrate` (`building`, with the phase it
 * reached), and per shard how far the build's backfill got (`last_id`), so a killed build resumes where it was.
 * Every statement is idempotent.
 */
export const LOOKUP_PHASES = ['tables', 'capture', 'backfill', 'ready'] as const;
export type LookupPhase = (typeof LOOKUP_PHASES)[number];

export function lookupCatalogSql(): string {
  return `
CREATE SCHEMA IF NOT EXISTS shardflake;
CREATE TABLE IF NOT EXISTS shardflake.lookups (
  name text PRIMARY KEY,
  table_name text NOT NULL,
  column_name text NOT NULL,
  is_unique boolean NOT NULL,
  phase text NOT NULL CHECK (phase IN (${LOOKUP_PHASES.map((p) => `'${p}'`).join(', ')})),
  started_at timestamptz NOT NULL DEFAULT now(),
  ready_at timestamptz
);
ALTER TABLE shardflake.lookups ADD COLUMN IF NOT EXISTS normalize text NOT NULL DEFAULT 'none';
ALTER TABLE shardflake.lookups ADD COLUMN IF NOT EXISTS owner_index boolean NOT NULL DEFAULT false;
ALTER TABLE shardflake.lookups ADD COLUMN IF NOT EXISTS direct_insert boolean NOT NULL DEFAULT false;
CREATE TABLE IF NOT EXISTS shardflake.lookup_builds (
  lookup text NOT NULL REFERENCES shardflake.lookups (name) ON DELETE CASCADE,
  shard integer NOT NULL,
  last_id bigint,
  done boolean NOT NULL DEFAULT false,
  PRIMARY KEY (lookup, shard)
);`;
}

export interface LookupRecord extends LookupDefinition {
  phase: LookupPhase;
  /** Every shard has the lookup's owner index (a unique lookup whose index `cluster migrate` has built). */
  ownerIndex: boolean;
  /**
   * Every shard's capture function lets an insert that writes its own entries through (lookups/ddl.ts
   * DIRECT_SETTING): made so by init, and by `cluster migrate` for a lookup built by an older version.
   */
  directInsert: boolean;
}

export async function installLookupCatalog(client: Queryable): Promise<void> {
  await client.query(lookupCatalogSql());
}

/**
 * Every recorded lookup (none when the catalog has no lookup table yet). `owner_index` is read through the row's
 * JSON form, so a router also reads a catalog that no `cluster migrate` of this version has touched (no column:
 * no index).
 */
export async function readLookups(client: Queryable): Promise<Map<string, LookupRecord>> {
  const { rows } = await client
    .query(
      // normalize and owner_index through the row's JSON: a catalog from before the columns reads as their default.
      `SELECT name, table_name, column_name, is_unique, phase,
              coalesce(to_jsonb(l) ->> 'normalize', 'none') AS normalize,
              coalesce((to_jsonb(l) ->> 'owner_index')::boolean, false) AS owner_index,
              coalesce((to_jsonb(l) ->> 'direct_insert')::boolean, false) AS direct_insert
         FROM shardflake.lookups l WHERE to_regclass('shardflake.lookups') IS NOT NULL`,
    )
    .catch((error: { code?: string }) => {
      if (error.code === '42P01') return { rows: [] };
      throw error;
    });
  return new Map(
    (
      rows as {
        name: string;
        table_name: string;
        column_name: string;
        is_unique: boolean;
        phase: LookupPhase;
        normalize: LookupNormalize;
        owner_index: boolean;
        direct_insert: boolean;
      }[]
    ).map((r) => [
      r.name,
      {
        name: r.name,
        table: r.table_name,
        column: r.column_name,
        unique: r.is_unique,
        normalize: r.normalize,
        phase: r.phase,
        ownerIndex: r.owner_index,
        directInsert: r.direct_insert,
      },
    ]),
  );
}

/** Records a lookup in `phase` unless it is recorded already; returns the record as it stands. */
export async function recordLookup(
  client: Queryable,
  lookup: LookupDefinition,
  phase: LookupPhase,
): Promise<LookupRecord> {
  await client.query(
    `INSERT INTO shardflake.lookups (name, table_name, column_name, is_unique, phase, ready_at, normalize)
     VALUES ($1, $2, $3, $4, $5, CASE WHEN $5 = 'ready' THEN now() END, $6) ON CONFLICT (name) DO NOTHING`,
    [lookup.name, lookup.table, lookup.column, lookup.unique, phase, lookup.normalize],
  );
  return (await readLookups(client)).get(lookup.name) as LookupRecord;
}

export async function setLookupPhase(client: Queryable, name: string, phase: LookupPhase): Promise<void> {
  await client.query(
    `UPDATE shardflake.lookups SET phase = $2, ready_at = CASE WHEN $2 = 'ready' THEN now() END WHERE name = $1`,
    [name, phase],
  );
}

/** Records that every shard has the lookup's owner index. */
export async function setOwnerIndex(client: Queryable, name: string): Promise<void> {
  await client.query('UPDATE shardflake.lookups SET owner_index = true WHERE name = $1', [name]);
}

/** Records that every shard's capture function lets a direct insert through (LookupRecord.directInsert). */
export async function setDirectInsert(client: Queryable, name: string): Promise<void> {
  await client.query('UPDATE shardflake.lookups SET direct_insert = true WHERE name = $1', [name]);
}

/** Per shard: the last id the backfill wrote entries through, and whether the shard is done. */
export async function readBuildProgress(
  client: Queryable,
  name: string,
): Promise<Map<number, { lastId: bigint | null; done: boolean }>> {
  const { rows } = await client.query(
    'SELECT shard, last_id, done FROM shardflake.lookup_builds WHERE lookup = $1',
    [name],
  );
  return new Map(
    (rows as { shard: number; last_id: string | bigint | null; done: boolean }[]).map((r) => [
      r.shard,
      { lastId: r.last_id === null ? null : BigInt(r.last_id), done: r.done },
    ]),
  );
}

export async function recordBuildProgress(
  client: Queryable,
  name: string,
  shard: number,
  lastId: bigint | null,
  done: boolean,
): Promise<void> {
  await client.query(
    `INSERT INTO shardflake.lookup_builds (lookup, shard, last_id, done) VALUES ($1, $2, $3, $4)
     ON CONFLICT (lookup, shard) DO UPDATE SET last_id = EXCLUDED.last_id, done = EXCLUDED.done`,
    [name, shard, lastId, done],
  );
}

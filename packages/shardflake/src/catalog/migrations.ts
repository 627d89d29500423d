import { createHash } from 'node:crypto';
import type { Migration, TableTemplate } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { type Queryable, wrapPgError } from '../postgres/connect.js';

/**
 * The cluster's schema history, kept by the catalog: one row per version — 0 for the table templates, 1, 2, … for
 * the migrations — with its name, the SQL, a checksum of the SQL and the definition as the config gave it. A
 * version is recorded (by `cluster init` or `cluster migrate`) before it is applied to any shard, and never
 * changed after, so the catalog can create a shard at the cluster's current version (a move's target, a new
 * server, an init re-run) from its own rows, whatever the config in hand still lists.
 *
 * Installed on first use, idempotently, under a transaction-scoped advisory lock (two first runs at once would
 * race on CREATE TABLE IF NOT EXISTS). Versioned with the catalog's other SQL: MIGRATIONS_CATALOG_SQL_VERSION.
 */
export const MIGRATIONS_CATALOG_SQL_VERSION = 1;

/** Advisory lock key (class, id) serialising writers of the history: 'SFmg'. */
const HISTORY_LOCK = [0x53466d67, 0] as const;

export function migrationsCatalogSql(): string {
  return `
CREATE SCHEMA IF NOT EXISTS shardflake;
CREATE TABLE IF NOT EXISTS shardflake.migrations (
  version integer PRIMARY KEY CHECK (version >= 0),
  name text NOT NULL,
  checksum text NOT NULL,
  sql text NOT NULL,
  definition jsonb NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE shardflake.migrations IS 'shardflake schema history v${MIGRATIONS_CATALOG_SQL_VERSION}: version 0 = table templates, then each migration, recorded before it is applied';`;
}

/** One version of the history as the catalog keeps it. */
export interface RecordedVersion {
  version: number;
  name: string;
  checksum: string;
  sql: string;
  /** Version 0: the table templates; later versions: the migration. */
  definition: { tables: TableTemplate[] } | { migration: Migration };
}

/** The checksum of a version's SQL: SHA-256 of its statements as a JSON list (so statement boundaries count). */
export function checksumOf(statements: readonly string[]): string {
  return createHash('sha256').update(JSON.stringify(statements)).digest('hex');
}

/** The rows a config's history would be recorded as (version 0 and every migration). */
export function versionsOf(config: {
  tables: readonly TableTemplate[];
  migrations: readonly Migration[];
}): RecordedVersion[] {
  const tableStatements = config.tables.flatMap((t) => t.statements);
  return [
    {
      version: 0,
      name: 'tables',
      checksum: checksumOf(tableStatements),
      sql: tableStatements.map((s) => `${s};`).join('\n'),
      definition: { tables: config.tables.map((t) => ({ name: t.name, statements: [...t.statements] })) },
    },
    ...config.migrations.map((m) => ({
      version: m.version,
      name: m.name,
      checksum: checksumOf(m.statements),
      sql: m.statements.map((s) => `${s};`).join('\n'),
      definition: { migration: m },
    })),
  ];
}

/** The recorded history in version order, or [] when none is recorded (a cluster from before it was kept). */
export async function readHistory(client: Queryable): Promise<RecordedVersion[]> {
  try {
    const exists = await client.query("SELECT to_regclass('shardflake.migrations') IS NOT NULL AS ok");
    if (!(exists.rows[0] as { ok: boolean }).ok) return [];
    const { rows } = await client.query(
      'SELECT version, name, checksum, sql, definition FROM shardflake.migrations ORDER BY version',
    );
    return rows as RecordedVersion[];
  } catch (error) {
    throw wrapPgError(error);
  }
}

/** True when the catalog's map holds a shard (init installs the shards table before it records history). */
async function anyShardRecorded(client: Queryable): Promise<boolean> {
  const { rows } = await client.query('SELECT EXISTS (SELECT 1 FROM shardflake.shards) AS any');
  return (rows[0] as { any: boolean }).any;
}

/**
 * Records `versions` that the catalog does not have yet, in one transaction holding the history lock, after
 * `check(recorded)` accepted the history as it is under the lock (it throws to refuse). Returns the history after.
 * `client` must not be inside a transaction.
 *
 * With `replaceWhileNoShard`, a history `check` refuses is replaced by `versions` when the catalog records no shard
 * yet (checked under the same lock): the history of a first init that failed before making a shard made nothing,
 * so a corrected config contradicts nothing.
 */
export async function recordHistory(
  client: Queryable,
  versions: readonly RecordedVersion[],
  check: (recorded: RecordedVersion[]) => void,
  options: { replaceWhileNoShard?: boolean } = {},
): Promise<RecordedVersion[]> {
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1, $2)', [...HISTORY_LOCK]);
    await client.query(migrationsCatalogSql());
    let recorded = await readHistory(client);
    try {
      check(recorded);
    } catch (refusal) {
      if (!options.replaceWhileNoShard || (await anyShardRecorded(client))) throw refusal;
      await client.query('DELETE FROM shardflake.migrations');
      recorded = [];
      check(recorded);
    }
    const known = new Set(recorded.map((r) => r.version));
    const fresh = versions.filter((v) => !known.has(v.version));
    if (fresh.length > 0)
      await client.query(
        `INSERT INTO shardflake.migrations (version, name, checksum, sql, definition)
         SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::jsonb[])`,
        [
          fresh.map((v) => v.version),
          fresh.map((v) => v.name),
          fresh.map((v) => v.checksum),
          fresh.map((v) => v.sql),
          fresh.map((v) => JSON.stringify(v.definition)),
        ],
      );
    await client.query('COMMIT');
    return [...recorded, ...fresh].sort((a, b) => a.version - b.version);
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    if (error instanceof ShardflakeError) throw error;
    throw wrapPgError(error);
  }
}

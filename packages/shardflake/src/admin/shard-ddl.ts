import { OLD_IDS_TABLE } from '../config/adopt.js';
import type { ClusterConfig, Migration } from '../config/config.js';
import { shardLookupsSql } from '../lookups/ddl.js';
import { generatorSqlParts } from '../postgres/generator-sql.js';
import { idShardCheckSql, idShardRule } from '../postgres/id-shard-rule.js';
import { quoteIdent, quoteLiteral } from '../postgres/identifier.js';

/**
 * The SQL that makes one logical shard: its schema, its id generator (from src/postgres), the config's tables and
 * every migration, the id rule on its tables (postgres/id-shard-rule.ts), and the bookkeeping table `_shardflake_migrations` (one row per applied version, 0 = the
 * tables). The bookkeeping table lives inside the shard's schema so that it travels with the shard when the shard
 * moves, and is written in the same transaction as the DDL it records: a shard is never half-migrated, and a shard
 * schema that has this table is complete.
 */
export const MIGRATIONS_TABLE = '_shardflake_migrations';

/** The old-id entries of an adopted cluster (config/adopt.ts says what they are). */
const OLD_IDS_SQL = `CREATE TABLE IF NOT EXISTS ${OLD_IDS_TABLE} (tbl text NOT NULL, id bigint NOT NULL, shard integer NOT NULL, PRIMARY KEY (tbl, id))`;

/** Runs the config's statements with the shard's schema as the only schema on the search path. */
export function inSchema(schema: string): string {
  return `SET LOCAL search_path TO ${quoteIdent(schema, 'schema')}`;
}

/**
 * The migrations as a new shard's creation transaction runs them: a CONCURRENTLY statement without that word (its
 * tables are empty and nobody else sees them yet). `cluster migrate` runs concurrent migrations itself.
 */
function migrationSql(migrations: readonly Migration[]): string[] {
  return migrations.flatMap((m) => [
    ...(m.concurrent ? m.concurrent.map((c) => c.inTransaction) : m.statements),
    `INSERT INTO ${MIGRATIONS_TABLE} (version, name) VALUES (${m.version}, ${quoteLiteral(m.name)})`,
  ]);
}

/** Statements that create one shard, to run inside a transaction (they use SET LOCAL). */
export function shardCreationSql(config: ClusterConfig, shard: number, schema: string): string {
  return shardsCreationSql(config, [{ shard, schema }]);
}

/**
 * Statements that create several shards in one transaction: first every shard's schema and generator objects,
 * then, shard by shard, the generator's seal, the tables and the migrations. The order is for speed on servers
 * with thousands of shards (see `generatorSqlParts`); each shard ends up exactly as `shardCreationSql` makes it.
 */
export function shardsCreationSql(
  config: ClusterConfig,
  shards: readonly { shard: number; schema: string }[],
): string {
  const parts = shards.map(({ shard, schema }) => ({
    schema,
    shard,
    ...generatorSqlParts({
      schema,
      shard,
      layout: config.layout,
      epoch: config.epoch,
      language: config.nextIdLanguage,
    }),
  }));
  const objects = parts.map(
    ({ schema, objects }) => `CREATE SCHEMA ${quoteIdent(schema, 'schema')};\n${objects}`,
  );
  const rest = parts.map(({ schema, shard, seal }) =>
    [
      seal.trim().replace(/;$/, ''),
      inSchema(schema),
      `CREATE TABLE ${MIGRATIONS_TABLE} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      ...config.tables.flatMap((t) => t.statements),
      `INSERT INTO ${MIGRATIONS_TABLE} (version, name) VALUES (0, 'tables')`,
      ...migrationSql(config.migrations),
      ...shardLookupsSql(schema, config.lookups ?? []),
      ...(config.adopt ? [OLD_IDS_SQL] : []),
      // Its tables are empty: the id rule goes on validated (postgres/id-shard-rule.ts).
      idShardCheckSql(schema, shard, idShardRule(config.layout, config.oldIdsBelow ?? null), true),
    ].join(';\n'),
  );
  // The generator's own CREATE SCHEMA IF NOT EXISTS would send a notice per shard ("already exists, skipping").
  const quiet = 'SET LOCAL client_min_messages TO warning;\n';
  return `${quiet}${objects.join('')}${rest.map((r) => `${r};\n`).join('')}`;
}

/**
 * Statements that bring a shard from `fromVersion` to `toVersion` (default: the latest migration), inside the shard's
 * transaction.
 */
export function shardMigrationSql(
  config: ClusterConfig,
  schema: string,
  fromVersion: number,
  toVersion = Number.POSITIVE_INFINITY,
): string {
  const pending = config.migrations.filter((m) => m.version > fromVersion && m.version <= toVersion);
  return `${[inSchema(schema), ...migrationSql(pending)].join(';\n')};\n`;
}

/** Lists this server's shard schemas with the highest applied version (null: schema exists but is not complete). */
export const LIST_SHARD_SCHEMAS_SQL = `
SELECT n.nspname AS schema, c.oid IS NOT NULL AS complete
FROM pg_namespace n
LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = '${MIGRATIONS_TABLE}' AND c.relkind = 'r'
WHERE n.nspname LIKE $1 || '%' AND n.nspname ~ ('^' || $1 || '[0-9]{4}$')`;

import * as v from 'valibot';
import { ShardflakeError } from '../errors/errors.js';
import { mapOf, migrationList, statements, tableName } from './fields.js';
import type { Migration, TableTemplate } from './schema-templates.js';
import { checkShardStatement } from './statement-rules.js';
import { checkedStatements, checkVersions, tableTemplate } from './tables.js';

/**
 * The config's reference tables (SPEC G2): small tables every shard joins against, one copy on every server.
 *
 * ```json
 * "referenceTables": { "plans": "CREATE TABLE plans (id int PRIMARY KEY, name text NOT NULL)" },
 * "referenceMigrations": [ { "version": 1, "name": "plan price", "sql": "ALTER TABLE plans ADD price int" } ]
 * ```
 *
 * A table's value is its CREATE TABLE statement, or a list (the table first, then its indexes), checked by the same
 * rules as a sharded table's statements (ddl-guard.ts: one statement, no other schema reachable); they run with the
 * reference schema as the whole search_path. `referenceMigrations` change them afterwards (`cluster migrate`), with
 * versions of their own, counted from 1 like the shards' migrations. A name may be a sharded table or a reference
 * table, never both: inside a shard session the shard's table would hide the reference table of the same name.
 */
/** The schema that holds a server's copy of the reference tables (reference/sql.ts installs it). */
export const REFERENCE_SCHEMA = 'shardflake_reference';

/** Table names starting with this are shardflake's own bookkeeping inside the reference schema. */
const RESERVED_PREFIX = '_shardflake';

export const referenceFields = {
  referenceTables: v.optional(
    mapOf(
      tableName('reference table name', RESERVED_PREFIX),
      statements('CREATE TABLE <name> (…), or a list: the CREATE TABLE first, then its indexes'),
      'must map each reference table name to its CREATE TABLE statement',
    ),
  ),
  referenceMigrations: v.optional(
    migrationList(
      'Changes to the reference tables, applied on every server by `cluster migrate`, versions 1, 2, 3 …',
    ),
  ),
};

type ReferenceFields = v.InferOutput<v.ObjectSchema<typeof referenceFields, undefined>>;

/** The reference tables of a config (one copy on every server) and their migrations. */
export interface ReferenceConfig {
  /** The reference tables, created on every server by `cluster init` (and by `cluster migrate` where missing). */
  referenceTables: TableTemplate[];
  /** Changes to the reference tables, applied on every server by `cluster migrate`, versions 1, 2, 3 … */
  referenceMigrations: Migration[];
}

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

/** The statements of a reference table or migration, checked; CONCURRENTLY is refused (reference tables are small). */
function statementsOf(value: string | string[], where: string, source: string) {
  const checked = checkedStatements(value, where, source);
  if (checked.some((c) => c.concurrent)) {
    throw bad(
      source,
      `${where} uses CONCURRENTLY, which reference tables do not need (they are small; a plain index build in the migration's transaction is brief): drop the word`,
    );
  }
  return checked;
}

/**
 * The second pass over `referenceTables` and `referenceMigrations`, against the sharded tables and migrations
 * already resolved (a name shared with a sharded table is refused, whichever side creates it).
 */
export function resolveReference(
  fields: ReferenceFields,
  source: string,
  sharded: { tables: readonly TableTemplate[]; migrations: readonly Migration[] },
): ReferenceConfig {
  const shardedNames = new Set(sharded.tables.map((t) => t.name));
  for (const m of sharded.migrations) {
    for (const sql of m.statements) {
      const made = checkShardStatement(sql, `${source}: migrations`).createsTable;
      if (made) shardedNames.add(made);
    }
  }
  const both = (name: string, where: string) =>
    bad(
      source,
      `${where} ${name} is both a sharded table and a reference table; inside a shard session the shard's table would hide the reference table, so give one of them another name`,
    );

  const referenceTables = Object.entries(fields.referenceTables ?? {}).map(([name, value]): TableTemplate => {
    const where = `referenceTables.${name}`;
    if (shardedNames.has(name)) throw both(name, `${where}: table`);
    return tableTemplate(name, statementsOf(value, where, source), where, source);
  });

  const listed = fields.referenceMigrations ?? [];
  checkVersions(listed, 'referenceMigrations', source);
  const referenceMigrations = listed.map((m, i): Migration => {
    const where = `referenceMigrations[${i}]`;
    const checked = statementsOf(m.sql, `${where}.sql`, source);
    for (const c of checked) {
      if (c.createsTable && shardedNames.has(c.createsTable))
        throw both(c.createsTable, `${where} creates table`);
      if (c.createsTable?.startsWith(RESERVED_PREFIX)) {
        throw bad(source, `${where} creates ${c.createsTable}, a name reserved for shardflake's bookkeeping`);
      }
    }
    return {
      version: m.version,
      name: m.name ?? `reference migration ${m.version}`,
      statements: checked.map((c) => c.sql),
    };
  });
  return { referenceTables, referenceMigrations };
}

/**
 * The names of the reference tables a config makes: its `referenceTables` and the tables its `referenceMigrations`
 * create (router.sql reads them where they live, in every server's reference schema).
 */
export function referenceTableNames(
  config: Partial<Pick<ReferenceConfig, 'referenceTables' | 'referenceMigrations'>>,
): Set<string> {
  const names = new Set((config.referenceTables ?? []).map((t) => t.name));
  for (const m of config.referenceMigrations ?? []) {
    for (const sql of m.statements) {
      const made = checkShardStatement(sql, 'referenceMigrations').createsTable;
      if (made) names.add(made);
    }
  }
  return names;
}

import { ShardflakeError } from '../../errors.js';
import { validateIdentifier } from '../../postgres/identifier.js';
import type { Migration, TableTemplate } from '../schema-templates.js';
import { checkShardStatement } from '../statement-rules.js';

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
export const REFERENCE_FIELDS = ['referenceTables', 'referenceMigrations'] as const;

/** Table names starting with this are shardflake's own bookkeeping inside the reference schema. */
const RESERVED_PREFIX = '_shardflake';

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

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A statement or non-empty list of statements, each checked; CONCURRENTLY is refused (reference tables are small). */
function statements(value: unknown, where: string, source: string) {
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0 || !list.every((s) => typeof s === 'string')) {
    throw bad(source, `${where} must be an SQL statement or a non-empty list of statements`);
  }
  return list.map((sql, i) => {
    const checked = checkShardStatement(sql, `${source}: ${where}${list.length > 1 ? `[${i}]` : ''}`);
    if (checked.concurrent) {
      throw bad(
        source,
        `${where} uses CONCURRENTLY, which reference tables do not need (they are small; a plain index build in the migration's transaction is brief): drop the word`,
      );
    }
    return checked;
  });
}

/**
 * Validates `referenceTables` and `referenceMigrations` of a raw config, against the sharded tables and migrations
 * already validated (a name shared with a sharded table is refused, whichever side creates it).
 */
export function referenceConfig(
  raw: Record<string, unknown>,
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

  const referenceTables: TableTemplate[] = [];
  if (raw.referenceTables !== undefined) {
    if (!isObject(raw.referenceTables)) {
      throw bad(source, '"referenceTables" must map each reference table name to its CREATE TABLE statement');
    }
    for (const [name, value] of Object.entries(raw.referenceTables)) {
      try {
        validateIdentifier(name, 'reference table name');
      } catch (error) {
        throw bad(source, (error as Error).message);
      }
      if (name !== name.toLowerCase())
        throw bad(source, `reference table name ${JSON.stringify(name)} must be lower case`);
      if (name.startsWith(RESERVED_PREFIX)) {
        throw bad(
          source,
          `reference table name ${name} is reserved (names starting with ${RESERVED_PREFIX} are shardflake's)`,
        );
      }
      if (shardedNames.has(name)) throw both(name, 'table');
      const checked = statements(value, `referenceTables.${name}`, source);
      if (checked[0]?.createsTable !== name) {
        throw bad(
          source,
          `referenceTables.${name} must start with CREATE TABLE ${name} (it ${checked[0]?.createsTable ? `creates ${checked[0].createsTable}` : 'does not create a table'})`,
        );
      }
      referenceTables.push({ name, statements: checked.map((c) => c.sql) });
    }
  }

  const referenceMigrations: Migration[] = [];
  if (raw.referenceMigrations !== undefined) {
    if (!Array.isArray(raw.referenceMigrations))
      throw bad(source, '"referenceMigrations" must be a list of { version, name, sql }');
    raw.referenceMigrations.forEach((m, i) => {
      const where = `referenceMigrations[${i}]`;
      if (!isObject(m)) throw bad(source, `${where} must be an object { version, name, sql }`);
      if (m.version !== i + 1) {
        throw bad(source, `${where} must have "version": ${i + 1} (versions count up from 1 without gaps)`);
      }
      const name = m.name ?? `reference migration ${i + 1}`;
      if (typeof name !== 'string') throw bad(source, `${where}.name must be a string`);
      const checked = statements(m.sql, `${where}.sql`, source);
      for (const c of checked) {
        if (c.createsTable && shardedNames.has(c.createsTable))
          throw both(c.createsTable, `${where} creates table`);
        if (c.createsTable?.startsWith(RESERVED_PREFIX)) {
          throw bad(
            source,
            `${where} creates ${c.createsTable}, a name reserved for shardflake's bookkeeping`,
          );
        }
      }
      referenceMigrations.push({ version: i + 1, name, statements: checked.map((c) => c.sql) });
    });
  }
  return { referenceTables, referenceMigrations };
}

import * as v from 'valibot';
import { ShardflakeError } from '../errors/errors.js';
import { mapOf, migrationList, statements, tableName } from './fields.js';
import type { Migration, TableTemplate } from './schema-templates.js';
import { type CheckedStatement, checkShardStatement, tokenize } from './statement-rules.js';

/**
 * The config's sharded tables and their migrations:
 *
 * ```json
 * "tables": { "photos": "CREATE TABLE photos (…)" },   // a statement, or a list (table first, then indexes)
 * "migrations": [ { "version": 1, "name": "likes count", "sql": "ALTER TABLE photos ADD …" } ]
 * ```
 *
 * Each statement runs inside every logical shard's schema; statement-rules.ts checks that none reaches out of it.
 */

/** Table names starting with this are shardflake's own bookkeeping inside each shard schema. */
export const RESERVED_TABLE_PREFIX = '_shardflake';

export const tablesFields = {
  tables: v.pipe(
    mapOf(
      tableName('table name', RESERVED_TABLE_PREFIX),
      statements('CREATE TABLE <name> (…), or a list: the CREATE TABLE first, then its indexes'),
      'must map each table name to its CREATE TABLE statement',
    ),
    v.minEntries(1, 'must map at least one table name to its CREATE TABLE statement'),
    v.description(
      'The sharded tables: each name → its CREATE TABLE statement (or a list: the table, then its indexes), run in every shard schema',
    ),
  ),
  migrations: v.optional(
    migrationList(
      'Changes to the sharded tables, applied to every shard by `cluster migrate`, versions 1, 2, 3 …',
    ),
  ),
};

type TablesFields = v.InferOutput<v.ObjectSchema<typeof tablesFields, undefined>>;

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

/** Each statement of a table or migration, checked by the shard statement rules. */
export function checkedStatements(
  value: string | string[],
  where: string,
  source: string,
): CheckedStatement[] {
  const list = typeof value === 'string' ? [value] : value;
  return list.map((sql, i) =>
    checkShardStatement(sql, `${source}: ${where}${list.length > 1 ? `[${i}]` : ''}`),
  );
}

/** Versions count up from 1 without gaps (the schema says whole numbers from 1; the order is checked here). */
/** A table's template from its checked statements, the first of which must create that table. */
export function tableTemplate(
  name: string,
  checked: readonly CheckedStatement[],
  where: string,
  source: string,
): TableTemplate {
  const creates = checked[0]?.createsTable;
  if (creates !== name) {
    throw bad(
      source,
      `${where} must start with CREATE TABLE ${name} (it ${creates ? `creates ${creates}` : 'does not create a table'})`,
    );
  }
  return { name, statements: checked.map((c) => c.sql) };
}

export function checkVersions(list: readonly { version: number }[], where: string, source: string): void {
  list.forEach((m, i) => {
    if (m.version !== i + 1)
      throw bad(
        source,
        `${where}[${i}].version must be ${i + 1}, not ${m.version} (versions count up from 1 without gaps)`,
      );
  });
}

/**
 * A migration's statements. CONCURRENTLY statements cannot run inside the shard's transaction, so a migration is
 * either all of them (run one by one outside a transaction) or none; mixing is refused rather than silently split,
 * because a split migration would no longer be all-or-nothing on a shard.
 */
function migrationStatements(
  value: string | string[],
  where: string,
  source: string,
): Pick<Migration, 'statements' | 'concurrent'> {
  const checked = checkedStatements(value, where, source);
  const concurrent = checked.flatMap((c) => (c.concurrent ? [c.concurrent] : []));
  if (concurrent.length === 0) return { statements: checked.map((c) => c.sql) };
  if (concurrent.length < checked.length) {
    throw bad(
      source,
      `${where} mixes CONCURRENTLY statements with others; they cannot share a transaction, so give the CONCURRENTLY ones a migration of their own`,
    );
  }
  return { statements: checked.map((c) => c.sql), concurrent };
}

/**
 * The table a statement creates or alters and whether it declares a primary key: CREATE TABLE x (… PRIMARY KEY …)
 * or ALTER TABLE [IF EXISTS] [ONLY] x ADD [CONSTRAINT c] PRIMARY KEY …. Read from the statement's tokens, so a
 * "primary key" inside a literal or a comment does not count.
 */
function primaryKeyOf(
  sql: string,
  where: string,
): { table: string | undefined; creates: boolean; declares: boolean } {
  const words = tokenize(sql, where).map((t) => (t.kind === 'word' ? t.text.toLowerCase() : t.text));
  const declares = words.some((w, i) => w === 'primary' && words[i + 1] === 'key');
  let at = words[1] === 'unlogged' ? 2 : 1;
  const creates = words[0] === 'create';
  if (!(creates || words[0] === 'alter') || words[at] !== 'table')
    return { table: undefined, creates, declares };
  at++;
  if (words[at] === 'if') at += creates ? 3 : 2;
  if (words[at] === 'only') at++;
  return { table: words[at], creates, declares };
}

/**
 * Every sharded table needs a primary key: a shard move copies tables with logical replication, which can carry a
 * table's updates and deletes only with a replica identity (the primary key), and the router's get, update and
 * delete find rows by it. Without one, a move refuses the table much later, on a live cluster.
 */
function checkPrimaryKeys(
  tables: readonly TableTemplate[],
  migrations: readonly Migration[],
  source: string,
): void {
  const created = new Map<string, string>();
  const keyed = new Set<string>();
  const note = (sql: string, where: string) => {
    const { table, creates, declares } = primaryKeyOf(sql, where);
    if (table === undefined) return;
    if (creates && !created.has(table)) created.set(table, where);
    if (declares) keyed.add(table);
  };
  for (const t of tables) {
    for (const sql of t.statements) note(sql, `tables.${t.name}`);
  }
  for (const m of migrations) {
    for (const sql of m.statements) note(sql, `migrations[${m.version - 1}]`);
  }
  for (const [table, where] of created) {
    if (!keyed.has(table))
      throw bad(
        source,
        `${where}: table ${table} has no primary key; every sharded table needs one (shard moves replicate updates and deletes by it, and get/update/delete find rows by it): add e.g. "id bigint PRIMARY KEY DEFAULT next_id()"`,
      );
  }
}

/**
 * The second pass over `tables` and `migrations`: every statement by the shard statement rules, each table's list
 * starting with its own CREATE TABLE, no CONCURRENTLY outside a migration, migration versions 1, 2, 3 …, and a
 * primary key on every table made.
 */
export function resolveTables(
  fields: TablesFields,
  source: string,
): { tables: TableTemplate[]; migrations: Migration[] } {
  const tables = Object.entries(fields.tables).map(([name, value]): TableTemplate => {
    const where = `tables.${name}`;
    const checked = checkedStatements(value, where, source);
    if (checked.some((c) => c.concurrent)) {
      throw bad(
        source,
        `${where} uses CONCURRENTLY, which only a migration can (a table's statements run in the transaction that creates it, on an empty table: drop the word)`,
      );
    }
    return tableTemplate(name, checked, where, source);
  });

  const listed = fields.migrations ?? [];
  checkVersions(listed, 'migrations', source);
  const migrations = listed.map(
    (m, i): Migration => ({
      version: m.version,
      name: m.name ?? `migration ${m.version}`,
      ...migrationStatements(m.sql, `migrations[${i}].sql`, source),
    }),
  );
  checkPrimaryKeys(tables, migrations, source);
  return { tables, migrations };
}

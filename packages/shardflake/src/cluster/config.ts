import { readFile } from 'node:fs/promises';
import { expectObject, expectString, kindOf, shown } from '../arguments.js';
import { ShardflakeError } from '../errors.js';
import { type Layout, resolveLayout, withEpoch } from '../ids/layout.js';
import { describeUrl } from '../postgres/connect.js';
import {
  DEFAULT_GENERATOR_LANGUAGE,
  GENERATOR_LANGUAGES,
  type GeneratorLanguage,
} from '../postgres/generator-sql.js';
import { validateIdentifier } from '../postgres/identifier.js';
import { expandEnv } from './config-env.js';
import { type LookupDefinition, parseLookups } from './lookups/config.js';
import { REFERENCE_FIELDS, type ReferenceConfig, referenceConfig } from './reference/config.js';
import type { Migration, TableTemplate } from './schema-templates.js';
import { type CheckedStatement, checkShardStatement, tokenize } from './statement-rules.js';

/**
 * The cluster config file (JSON), as SPEC section 2 fixes it, plus optional fields:
 *
 * ```json
 * {
 *   "servers": { "a": "postgres://…", "b": "postgres://…" },
 *   "catalog": "a",
 *   "logicalShards": 2048,
 *   "epoch": "2024-01-01T00:00:00Z",          // ISO date or ms since 1970; default: the layout's own epoch
 *   "layout": "instagram",                     // a preset with a shard field (default instagram)
 *   "schemaPrefix": "shard_",                  // shard 42 lives in schema shard_0042
 *   "nextIdLanguage": "plpgsql",               // how each shard's next_id() is written: plpgsql (default) or sql
 *   "tables": { "photos": "CREATE TABLE photos (…)" },   // a statement, or a list (table first, then indexes)
 *   "migrations": [ { "version": 1, "name": "likes count", "sql": "ALTER TABLE photos ADD …" } ],
 *   "lookups": { "user_email": { "table": "users", "column": "email", "unique": true } }   // see lookups/config.ts
 * }
 * ```
 */
export const MAX_LOGICAL_SHARDS = 8192;
/** Table names starting with this are shardflake's own bookkeeping inside each shard schema. */
export const RESERVED_TABLE_PREFIX = '_shardflake';

export type { Migration, TableTemplate };

/**
 * A validated cluster config, as `loadConfig`, `parseConfig` and `validateConfig` return it: servers and their
 * nodes, the catalog server, the logical shards, the id layout and epoch, the table templates and migrations,
 * reference tables and lookups.
 */
export interface ClusterConfig extends ReferenceConfig {
  /** Each server's first node URL (its primary when the config lists several): for display and one-node code. */
  servers: Record<string, string>;
  /**
   * Every node URL of each server, in config order: one URL, or a primary and its streaming replicas (roles are
   * found at run time with pg_is_in_recovery(), so the order does not say which one is the primary).
   */
  nodes: Record<string, string[]>;
  catalog: string;
  logicalShards: number;
  /** Epoch in ms since 1970. */
  epoch: number;
  /** The id layout with the config's epoch applied. */
  layout: Layout;
  schemaPrefix: string;
  /** How new shards' next_id() is written (see GeneratorSqlOptions.language). */
  nextIdLanguage: GeneratorLanguage;
  tables: TableTemplate[];
  migrations: Migration[];
  /** Columns found without their shard key (src/cluster/lookups/). */
  lookups: LookupDefinition[];
  /** Where the config came from (file path), for messages. */
  source: string;
}

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function checkedList(value: unknown, where: string, source: string): CheckedStatement[] {
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0 || !list.every((s) => typeof s === 'string')) {
    throw bad(source, `${where} must be an SQL statement or a non-empty list of statements`);
  }
  return list.map((sql, i) =>
    checkShardStatement(sql, `${source}: ${where}${list.length > 1 ? `[${i}]` : ''}`),
  );
}

function statementList(value: unknown, where: string, source: string): string[] {
  const checked = checkedList(value, where, source);
  if (checked.some((c) => c.concurrent)) {
    throw bad(
      source,
      `${where} uses CONCURRENTLY, which only a migration can (a table's statements run in the transaction that creates it, on an empty table: drop the word)`,
    );
  }
  return checked.map((c) => c.sql);
}

/**
 * A migration's statements. CONCURRENTLY statements cannot run inside the shard's transaction, so a migration is
 * either all of them (run one by one outside a transaction) or none; mixing is refused rather than silently split,
 * because a split migration would no longer be all-or-nothing on a shard.
 */
function migrationStatements(
  value: unknown,
  where: string,
  source: string,
): Pick<Migration, 'statements' | 'concurrent'> {
  const checked = checkedList(value, where, source);
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

function parseEpoch(value: unknown, layout: Layout, source: string, now: number): number {
  if (value === undefined) return layout.epoch;
  let ms: number;
  if (typeof value === 'number') ms = value;
  else if (typeof value === 'string' && /^\d{4}-\d{2}-\d{2}/.test(value)) ms = Date.parse(value);
  else ms = Number.NaN;
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw bad(
      source,
      `"epoch" must be an ISO 8601 date such as "2024-01-01T00:00:00Z" or whole milliseconds since 1970, not ${shown(value)}`,
    );
  }
  if (ms > now) {
    throw bad(source, `"epoch" ${new Date(ms).toISOString()} is in the future; ids before it cannot be made`);
  }
  return ms;
}

/**
 * A server's value: one postgres:// URL, or a non-empty list of them (a primary and its streaming replicas, in any
 * order). Only what can be seen without connecting is checked here; roles and replication are checked live, when
 * a command or a router connects (src/cluster/topology/roles.ts).
 */
function nodeUrls(name: string, value: unknown, source: string): string[] {
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0) {
    throw bad(
      source,
      `server ${name} needs a postgres:// URL or a non-empty list of node URLs (a primary and its replicas)`,
    );
  }
  return list.map((written, i) => {
    const where = Array.isArray(value) ? `server ${name} node ${i + 1}` : `server ${name}`;
    const url = typeof written === 'string' ? expandEnv(written, `${where}'s URL`, source) : written;
    if (typeof url !== 'string' || !/^postgres(ql)?:\/\//.test(url))
      throw bad(source, `${where} needs a postgres:// URL`);
    try {
      new URL(url);
    } catch {
      throw bad(source, `${where} has a malformed URL ${describeUrl(url)}`);
    }
    return url;
  });
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

/** Validates a parsed config object; every problem is an INVALID_CONFIG or UNKNOWN_SERVER with one sentence. */
export function validateConfig(raw: unknown, source = 'config', now = Date.now()): ClusterConfig {
  if (!isObject(raw)) throw bad(source, 'must be a JSON object');
  const known = [
    'servers',
    'catalog',
    'logicalShards',
    'epoch',
    'layout',
    'schemaPrefix',
    'nextIdLanguage',
    'tables',
    'migrations',
    ...REFERENCE_FIELDS,
    'lookups',
  ];
  const unknown = Object.keys(raw).filter((k) => !known.includes(k) && !k.startsWith('$') && k !== 'comment');
  if (unknown.length > 0)
    throw bad(source, `unknown field ${JSON.stringify(unknown[0])} (known: ${known.join(', ')})`);

  if (!isObject(raw.servers) || Object.keys(raw.servers).length === 0) {
    throw bad(source, '"servers" must map at least one server name to a postgres:// URL');
  }
  const servers: Record<string, string> = {};
  const nodes: Record<string, string[]> = {};
  const serverOfUrl = new Map<string, string>();
  for (const [name, value] of Object.entries(raw.servers)) {
    if (!/^[A-Za-z0-9_-]{1,63}$/.test(name)) {
      throw bad(source, `server name ${JSON.stringify(name)} must be 1–63 letters, digits, _ or -`);
    }
    const urls = nodeUrls(name, value, source);
    for (const url of urls) {
      const other = serverOfUrl.get(url);
      if (other !== undefined) {
        throw bad(
          source,
          other === name
            ? `server ${name} lists node ${describeUrl(url)} twice`
            : `node ${describeUrl(url)} is listed under both server ${other} and server ${name}`,
        );
      }
      serverOfUrl.set(url, name);
    }
    servers[name] = urls[0] as string;
    nodes[name] = urls;
  }
  if (typeof raw.catalog !== 'string') throw bad(source, '"catalog" must name one of the servers');
  if (!(raw.catalog in servers)) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `${source}: "catalog" names server ${shown(raw.catalog)}, which "servers" does not define (servers: ${Object.keys(servers).join(', ')})`,
    );
  }

  const layoutName = raw.layout ?? 'instagram';
  if (typeof layoutName !== 'string') throw bad(source, '"layout" must be a preset name such as "instagram"');
  let base: Layout;
  try {
    base = resolveLayout(layoutName);
  } catch (error) {
    throw bad(source, (error as Error).message);
  }
  const shardField = base.fields.find((f) => f.kind === 'shard');
  if (!shardField) {
    throw bad(source, `layout ${layoutName} has no shard field; a cluster needs one (e.g. "instagram")`);
  }
  const limit = Math.min(MAX_LOGICAL_SHARDS, Number(shardField.max) + 1);
  const shards = raw.logicalShards;
  if (typeof shards !== 'number' || !Number.isInteger(shards) || shards < 1 || shards > limit) {
    throw bad(source, `"logicalShards" must be a whole number from 1 to ${limit}, not ${shown(shards)}`);
  }
  const epoch = parseEpoch(raw.epoch, base, source, now);
  const layout = withEpoch(base, epoch);

  const schemaPrefix = raw.schemaPrefix ?? 'shard_';
  if (typeof schemaPrefix !== 'string' || !/^[a-z_][a-z0-9_]{0,40}$/.test(schemaPrefix)) {
    throw bad(
      source,
      '"schemaPrefix" must be lower-case letters, digits or _ (at most 41), starting with a letter or _',
    );
  }

  const nextIdLanguage = raw.nextIdLanguage ?? DEFAULT_GENERATOR_LANGUAGE;
  if (!(GENERATOR_LANGUAGES as readonly unknown[]).includes(nextIdLanguage)) {
    throw bad(source, `"nextIdLanguage" must be one of ${GENERATOR_LANGUAGES.join(', ')}`);
  }

  if (!isObject(raw.tables) || Object.keys(raw.tables).length === 0) {
    throw bad(source, '"tables" must map at least one table name to its CREATE TABLE statement');
  }
  const tables: TableTemplate[] = [];
  for (const [name, value] of Object.entries(raw.tables)) {
    try {
      validateIdentifier(name, 'table name');
    } catch (error) {
      throw bad(source, (error as Error).message);
    }
    if (name !== name.toLowerCase())
      throw bad(source, `table name ${JSON.stringify(name)} must be lower case`);
    if (name.startsWith(RESERVED_TABLE_PREFIX)) {
      throw bad(
        source,
        `table name ${name} is reserved (names starting with ${RESERVED_TABLE_PREFIX} are shardflake's)`,
      );
    }
    const statements = statementList(value, `tables.${name}`, source);
    const first = checkShardStatement(statements[0] as string, `${source}: tables.${name}`);
    if (first.createsTable !== name) {
      throw bad(
        source,
        `tables.${name} must start with CREATE TABLE ${name} (it ${first.createsTable ? `creates ${first.createsTable}` : 'does not create a table'})`,
      );
    }
    tables.push({ name, statements });
  }

  const migrations: Migration[] = [];
  if (raw.migrations !== undefined) {
    if (!Array.isArray(raw.migrations))
      throw bad(source, '"migrations" must be a list of { version, name, sql }');
    raw.migrations.forEach((m, i) => {
      if (!isObject(m)) throw bad(source, `migrations[${i}] must be an object { version, name, sql }`);
      if (m.version !== i + 1) {
        throw bad(
          source,
          `migrations[${i}] must have "version": ${i + 1} (versions count up from 1 without gaps)`,
        );
      }
      const name = m.name ?? `migration ${i + 1}`;
      if (typeof name !== 'string') throw bad(source, `migrations[${i}].name must be a string`);
      migrations.push({
        version: i + 1,
        name,
        ...migrationStatements(m.sql, `migrations[${i}].sql`, source),
      });
    });
  }

  checkPrimaryKeys(tables, migrations, source);

  return {
    servers,
    nodes,
    catalog: raw.catalog,
    logicalShards: shards,
    epoch,
    layout,
    schemaPrefix,
    nextIdLanguage: nextIdLanguage as GeneratorLanguage,
    tables,
    migrations,
    ...referenceConfig(raw, source, { tables, migrations }),
    lookups: parseLookups(
      raw.lookups,
      tables.map((t) => t.name),
      source,
    ),
    source,
  };
}

/** Parses config text (JSON). */
export function parseConfig(text: string, source = 'config'): ClusterConfig {
  if (typeof text !== 'string') throw bad(source, `must be JSON text, not ${kindOf(text)}`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw bad(source, `is not valid JSON (${(error as Error).message})`);
  }
  return validateConfig(raw, source);
}

/** Reads and validates a config file. */
export async function loadConfig(path: string): Promise<ClusterConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new ShardflakeError('INVALID_CONFIG', `cannot read config file ${path} (${code})`, {
      cause: error,
    });
  }
  return parseConfig(text, path);
}

/** Schema name of a logical shard: prefix + shard number zero-padded to 4 digits (`shard_0042`). */
export function shardSchema(config: Pick<ClusterConfig, 'schemaPrefix'>, shard: number): string {
  expectString(expectObject(config, 'shardSchema: config').schemaPrefix, 'shardSchema: config.schemaPrefix');
  if (!Number.isSafeInteger(shard) || shard < 0) {
    throw new ShardflakeError('UNKNOWN_SHARD', `logical shard ${shown(shard)} is not a whole number from 0`);
  }
  return `${config.schemaPrefix}${String(shard).padStart(4, '0')}`;
}

/** The schema version a fully migrated shard has. */
export function targetVersion(config: Pick<ClusterConfig, 'migrations'>): number {
  return config.migrations.length;
}

import { ShardflakeError } from '../../errors.js';
import { validateIdentifier } from '../../postgres/identifier.js';

/**
 * The config's `lookups` field (SPEC §2):
 *
 * ```json
 * "lookups": { "user_email": { "table": "users", "column": "email", "unique": true } }
 * ```
 *
 * A lookup finds rows of `table` by `column` without their shard key; `unique` makes the column's values unique
 * across the whole cluster. The name becomes part of shardflake's table and function names inside every shard
 * schema (`_shardflake_lookup_<name>`, `_shardflake_capture_<name>`), hence the 40-character limit (Postgres names
 * stop at 63 bytes).
 */
export interface LookupDefinition {
  name: string;
  table: string;
  column: string;
  unique: boolean;
}

export const MAX_LOOKUP_NAME = 40;

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Validates `raw.lookups` against the config's table names; absent means no lookups. */
export function parseLookups(raw: unknown, tables: readonly string[], source: string): LookupDefinition[] {
  if (raw === undefined) return [];
  if (!isObject(raw))
    throw bad(source, '"lookups" must map lookup names to { "table": …, "column": …, "unique": true|false }');
  const lookups: LookupDefinition[] = [];
  const seen = new Set<string>();
  for (const [name, value] of Object.entries(raw)) {
    const where = `lookups.${name}`;
    if (!/^[a-z_][a-z0-9_]*$/.test(name) || name.length > MAX_LOOKUP_NAME)
      throw bad(
        source,
        `lookup name ${JSON.stringify(name).slice(0, 60)} must be lower-case letters, digits or _ (at most ${MAX_LOOKUP_NAME})`,
      );
    if (!isObject(value)) throw bad(source, `${where} must be an object { "table": …, "column": … }`);
    const unknown = Object.keys(value).filter((k) => !['table', 'column', 'unique'].includes(k));
    if (unknown.length > 0)
      throw bad(
        source,
        `${where} has unknown field ${JSON.stringify(unknown[0])} (known: table, column, unique)`,
      );
    const { table, column } = value;
    if (typeof table !== 'string' || !tables.includes(table))
      throw bad(source, `${where}.table must name one of the config's tables (${tables.join(', ')})`);
    if (typeof column !== 'string') throw bad(source, `${where}.column must be a column name`);
    try {
      validateIdentifier(column, `${where}.column`);
    } catch (error) {
      throw bad(source, (error as Error).message);
    }
    if (column === 'id') throw bad(source, `${where}.column cannot be id (rows are found by id already)`);
    const unique = value.unique ?? false;
    if (typeof unique !== 'boolean') throw bad(source, `${where}.unique must be true or false`);
    const key = `${table}.${column}`;
    if (seen.has(key)) throw bad(source, `${where}: ${key} already has a lookup`);
    seen.add(key);
    lookups.push({ name, table, column, unique });
  }
  return lookups;
}

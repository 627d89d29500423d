import * as v from 'valibot';
import { ShardflakeError } from '../errors/errors.js';
import { PLAIN_IDENTIFIER, PLAIN_IDENTIFIER_RULE } from '../postgres/identifier.js';
import { mapOf, section } from './fields.js';

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
  /**
   * The lookup's key in the config, used by `router.lookup(name, …)` and in its tables' names (≤ 40
   * characters).
   */
  name: string;
  /** The config's sharded table whose rows the lookup finds. */
  table: string;
  /** The column of `table` the lookup finds rows by (never `id`, which routes by itself). */
  column: string;
  /**
   * True when the column's values must be unique across the whole cluster (UNIQUE_VIOLATION); default
   * false.
   */
  unique: boolean;
  /**
   * How values are compared: `none` (the column's text as it is, the default) or `lower` (ASCII letters A–Z in
   * lower case, on write and on read: `Ann@Example.com` and `ann@example.com` are one value).
   */
  normalize: LookupNormalize;
}

/** The ways a lookup can normalize its values (see LookupDefinition.normalize). */
export const LOOKUP_NORMALIZE = ['none', 'lower'] as const;
export type LookupNormalize = (typeof LOOKUP_NORMALIZE)[number];

export const MAX_LOOKUP_NAME = 40;

export const lookupsFields = {
  lookups: v.optional(
    v.pipe(
      mapOf(
        v.pipe(
          v.string(),
          v.regex(
            new RegExp(`^[a-z_][a-z0-9_]{0,${MAX_LOOKUP_NAME - 1}}$`),
            `is not a good lookup name: use lower-case letters, digits or _ (at most ${MAX_LOOKUP_NAME}), starting with a letter or _`,
          ),
        ),
        section(
          {
            table: v.pipe(
              v.string("must name one of the config's tables"),
              v.description('The sharded table whose rows the lookup finds'),
            ),
            column: v.pipe(
              v.string('must be a column name'),
              v.regex(PLAIN_IDENTIFIER, `is not a plain SQL identifier (${PLAIN_IDENTIFIER_RULE})`),
              v.description('The column the lookup finds rows by (not id: rows are found by id already)'),
            ),
            unique: v.optional(
              v.pipe(
                v.boolean('must be true or false'),
                v.description("true: the column's values are unique across the whole cluster"),
              ),
              false,
            ),
            normalize: v.optional(
              v.pipe(
                v.picklist(LOOKUP_NORMALIZE, 'must be "none" or "lower"'),
                v.description(
                  '"lower": values are compared with ASCII letters in lower case, on write and on read (Ann@X.com finds ann@x.com); default "none"',
                ),
              ),
              'none',
            ),
          },
          'must be an object { "table": …, "column": …, "unique": true|false, "normalize": "none"|"lower" }',
        ),
        'must map lookup names to { "table": …, "column": …, "unique": true|false }',
      ),
      v.description('Columns found without their shard key: each lookup name → { table, column, unique }'),
    ),
  ),
};

type LookupsFields = v.InferOutput<v.ObjectSchema<typeof lookupsFields, undefined>>;

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

/** The second pass over `lookups`: each names one of the config's tables, not its id, and no column has two. */
export function resolveLookups(
  fields: LookupsFields,
  tables: readonly string[],
  source: string,
): LookupDefinition[] {
  const seen = new Map<string, string>();
  return Object.entries(fields.lookups ?? {}).map(([name, { table, column, unique, normalize }]) => {
    const where = `lookups.${name}`;
    if (!tables.includes(table))
      throw bad(source, `${where}.table must name one of the config's tables (${tables.join(', ')})`);
    if (column === 'id') throw bad(source, `${where}.column cannot be id (rows are found by id already)`);
    const key = `${table}.${column}`;
    const other = seen.get(key);
    if (other !== undefined) throw bad(source, `${where}: ${key} already has a lookup (lookups.${other})`);
    seen.set(key, name);
    return { name, table, column, unique, normalize };
  });
}

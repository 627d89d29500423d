import * as v from 'valibot';
import { ShardflakeError } from '../errors/errors.js';
import { PLAIN_IDENTIFIER, PLAIN_IDENTIFIER_RULE } from '../postgres/identifier.js';
import { expandEnv } from './env.js';
import { mapOf, section } from './fields.js';

/**
 * The config's `adopt` section (SPEC §I): the live database a cluster is adopted from, and how each of its tables
 * is placed. `shardflake cluster adopt plan` writes it; `adopt run|cutover|status|abort` read it.
 *
 * ```json
 * "adopt": {
 *   "from": "postgres://app@db.internal:5432/app",
 *   "schema": "public",
 *   "root": "users",
 *   "place": {
 *     "users":    { "column": "id" },
 *     "photos":   { "column": "user_id", "parent": "users" },
 *     "comments": { "column": "photo_id", "parent": "photos" }
 *   },
 *   "reference": ["plans"]
 * }
 * ```
 *
 * The root is placed by its own id (old id `n` lives in shard `n mod logicalShards`, the rule of an integer shard
 * key); every other sharded table beside its parent row (`column` holds the parent's id). Reference tables are
 * copied to every server. Every name here is also in `tables` (sharded) or `referenceTables`.
 */
export interface AdoptConfig {
  /** The source database's URL (`${VAR}` expanded). */
  from: string;
  /** The source's schema holding the adopted tables (default public). */
  schema: string;
  /** The name routers know the source by while the adoption runs (default `source`). */
  server: string;
  /** The root table: its rows own the others. */
  root: string;
  /** Each sharded table's placement column and, except for the root, the table that column points at. */
  place: Record<string, { column: string; parent?: string }>;
  /** Tables copied as reference tables. */
  reference: string[];
  /** Most WAL the source may hold for the adoption's slot before the run stops, in bytes (default 4 GB). */
  maxSlotWalBytes: number;
  /** Longest write pause of the cutover, in ms (default 1000). */
  pauseBoundMs: number;
}

const identifier = (what: string) =>
  v.pipe(
    v.string(`must be ${what}`),
    v.regex(PLAIN_IDENTIFIER, `is not a plain SQL identifier (${PLAIN_IDENTIFIER_RULE})`),
  );

export const adoptFields = {
  adopt: v.optional(
    section(
      {
        from: v.pipe(
          v.string('needs a postgres:// URL'),
          v.regex(/^(postgres(ql)?:\/\/|\$\{)/, 'needs a postgres:// URL'),
          // biome-ignore lint/suspicious/noTemplateCurlyInString: ${VAR} is the config's own syntax, shown to the reader
          v.description('The live database adopted into the cluster (a postgres:// URL; ${VAR} allowed)'),
        ),
        schema: v.optional(
          v.pipe(identifier('a schema name'), v.description("The source's schema (default public)")),
        ),
        server: v.optional(
          v.pipe(
            v.string(),
            v.regex(/^[A-Za-z0-9_-]{1,63}$/, 'is not a good server name: use 1–63 letters, digits, _ or -'),
            v.description('The name routers know the source by while the adoption runs (default source)'),
          ),
        ),
        root: v.pipe(identifier('a table name'), v.description('The root table: its rows own the others')),
        place: v.pipe(
          mapOf(
            identifier('a table name'),
            section(
              {
                column: v.pipe(identifier('a column name'), v.description('The placement column')),
                parent: v.optional(
                  v.pipe(identifier('a table name'), v.description('The table the column points at')),
                ),
              },
              'must be an object { "column": …, "parent": … }',
            ),
            'must map each sharded table to { "column": …, "parent": … }',
          ),
          v.description(
            'How each sharded table is placed: the root by its id, the others beside their parent',
          ),
        ),
        reference: v.optional(
          v.pipe(
            v.array(identifier('a table name'), 'must be a list of table names'),
            v.description('Source tables copied as reference tables'),
          ),
        ),
        maxSlotWalBytes: v.optional(
          v.pipe(
            v.number('must be a whole number of bytes'),
            v.safeInteger('must be a whole number of bytes'),
            v.minValue(1_000_000, 'must be at least 1000000 bytes'),
            v.description(
              'Most WAL the source may hold for the adoption before the run stops (default 4 GB)',
            ),
          ),
        ),
        pauseBoundMs: v.optional(
          v.pipe(
            v.number('must be a whole number of ms'),
            v.safeInteger('must be a whole number of ms'),
            v.minValue(50, 'must be at least 50 ms'),
            v.description('Longest write pause of the cutover, in ms (default 1000)'),
          ),
        ),
      },
      'must be an object { "from": …, "root": …, "place": { … } }',
    ),
  ),
};

type AdoptFields = v.InferOutput<v.ObjectSchema<typeof adoptFields, undefined>>;

/**
 * In a cluster adopted from a live database: which shard holds each row of a non-root table that the source made,
 * by its old id. Entry (table, id) lives in shard id mod logicalShards, so finding an old id's row is one read of
 * that entry, then the row (routing/old-ids.ts). Filled by the adoption's copy and stream, read-only after the
 * cutover (a deleted row's entry only leads to no row). A table of every shard schema (admin/shard-ddl.ts makes it
 * when the config has `adopt`), so entries move with their shard.
 */
export const OLD_IDS_TABLE = '_shardflake_old_ids';

export const DEFAULT_MAX_SLOT_WAL_BYTES = 4_000_000_000;
export const DEFAULT_ADOPT_PAUSE_MS = 1000;

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

/**
 * The second pass over `adopt`: every placed table is a sharded table of the config, the root is placed by a
 * column and no parent, every other table names a placed parent, placements reach the root without a cycle, and
 * reference tables are reference tables of the config.
 */
export function resolveAdopt(
  fields: AdoptFields,
  tables: readonly string[],
  referenceTables: readonly string[],
  servers: readonly string[],
  source: string,
): AdoptConfig | undefined {
  const a = fields.adopt;
  if (!a) return undefined;
  const where = 'adopt';
  const server = a.server ?? 'source';
  if (servers.includes(server))
    throw bad(
      source,
      `${where}.server ${server} is also a server of the cluster; name the source another way`,
    );
  const place = a.place;
  if (!(a.root in place)) throw bad(source, `${where}.place must place the root table ${a.root}`);
  for (const [name, p] of Object.entries(place)) {
    if (!tables.includes(name))
      throw bad(source, `${where}.place.${name} must name one of the config's tables (${tables.join(', ')})`);
    if (name === a.root && p.parent !== undefined)
      throw bad(source, `${where}.place.${name} is the root: it is placed by its own id and has no parent`);
    if (name !== a.root && (p.parent === undefined || !(p.parent in place)))
      throw bad(source, `${where}.place.${name}.parent must name another placed table`);
  }
  for (const name of Object.keys(place)) {
    const seen = new Set<string>();
    for (let t: string | undefined = name; t !== undefined && t !== a.root; t = place[t]?.parent) {
      if (seen.has(t)) throw bad(source, `${where}.place: ${name}'s parents run in a circle`);
      seen.add(t);
    }
  }
  const reference = a.reference ?? [];
  for (const name of reference) {
    if (!referenceTables.includes(name))
      throw bad(source, `${where}.reference lists ${name}, which referenceTables does not define`);
  }
  return {
    from: expandEnv(a.from, `${where}.from`, source),
    schema: a.schema ?? 'public',
    server,
    root: a.root,
    place,
    reference,
    maxSlotWalBytes: a.maxSlotWalBytes ?? DEFAULT_MAX_SLOT_WAL_BYTES,
    pauseBoundMs: a.pauseBoundMs ?? DEFAULT_ADOPT_PAUSE_MS,
  };
}

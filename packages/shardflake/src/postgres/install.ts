import { ShardflakeError } from '../errors/errors.js';
import { type Queryable, wrapPgError } from './connect.js';
import {
  GENERATOR_MISMATCH_SQLSTATE,
  GENERATOR_OBJECTS,
  type GeneratorSqlOptions,
  type GeneratorSqlPlan,
  generatorPlan,
  generatorSql,
} from './generator-sql.js';
import { qualified, validateIdentifier } from './identifier.js';

/**
 * Installs the generator over a `pg` client: the library twin of `shardflake sql generator`. Re-running it is
 * harmless (same shard, layout and epoch) and upgrades an older version in place, keeping the counter. It runs
 * in the client's current transaction if one is open, else as one implicit transaction (a multi-statement query).
 */
export async function installGenerator(
  client: Queryable,
  options: GeneratorSqlOptions,
): Promise<GeneratorSqlPlan> {
  const plan = generatorPlan(options);
  try {
    await client.query(generatorSql(options));
  } catch (error) {
    throw wrapGeneratorError(error);
  }
  return plan;
}

function wrapGeneratorError(error: unknown): ShardflakeError {
  const e = error as { code?: string; message?: string };
  if (e?.code === GENERATOR_MISMATCH_SQLSTATE) {
    return new ShardflakeError('INVALID_ARGUMENT', String(e.message), { sqlState: e.code, cause: error });
  }
  if (e?.code === '42883' || e?.code === '42P01') {
    return new ShardflakeError(
      'INVALID_ARGUMENT',
      `no shardflake generator is installed there (${e.message})`,
      {
        sqlState: e.code,
        cause: error,
      },
    );
  }
  return wrapPgError(error);
}

/** What a schema's installed generator says about itself (the comment on `next_id()`), or null. */
export interface InstalledGenerator {
  /**
   * The version of shardflake's generator SQL installed (GENERATOR_VERSION); an older one is upgraded in
   * place.
   */
  version: number;
  /** The logical shard number the installed `next_id()` writes into its ids. */
  shard: number;
  /** The name of the layout the installed generator makes ids of, such as `instagram`. */
  layout: string;
  /** The installed generator's epoch, in milliseconds since 1970. */
  epoch: number;
  /** Length of one tick of the installed generator's time field, in milliseconds. */
  timeUnitMs: number;
  /** `name:kind:bits` of every field, most significant first. */
  fields: string;
}

/**
 * The generator installed in a schema, read from the comment on its `next_id()` (version, shard, layout, epoch), or
 * null when the schema has none.
 */
export async function readInstalledGenerator(
  client: Queryable,
  schema: string,
): Promise<InstalledGenerator | null> {
  validateIdentifier(schema, 'schema');
  let rows: unknown[];
  try {
    ({ rows } = await client.query(
      `SELECT pg_catalog.obj_description(p.oid, 'pg_proc') AS comment
       FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
       WHERE n.nspname = $1 AND p.proname = $2 AND p.pronargs = 0`,
      [schema, GENERATOR_OBJECTS.nextId],
    ));
  } catch (error) {
    throw wrapPgError(error);
  }
  const comment = (rows[0] as { comment: string | null } | undefined)?.comment;
  if (!comment?.startsWith('{')) return null;
  const { shardflake, ...rest } = JSON.parse(comment) as InstalledGenerator & { shardflake?: string };
  return shardflake === 'generator' ? rest : null;
}

/**
 * The largest id the schema's generator may have handed out (every id it issued is ≤ this), or null when it
 * has issued none. Used by shard moves to carry the generator's state to another server.
 */
export async function lastIssuedId(client: Queryable, schema: string): Promise<bigint | null> {
  try {
    const { rows } = await client.query(
      `SELECT ${qualified(schema, GENERATOR_OBJECTS.lastIssued)}()::text AS id`,
    );
    const id = (rows[0] as { id: string | null } | undefined)?.id;
    return id === null || id === undefined ? null : BigInt(id);
  } catch (error) {
    throw wrapGeneratorError(error);
  }
}

/**
 * Afterwards `next_id()` in `schema` returns ids greater than `id`, even when this server's clock is behind the
 * one that issued `id` (a shard that moved). It goes through the generator's own catch-up, so it is safe while
 * other sessions call `next_id()`, and it never moves the counter backwards.
 */
export async function ensureGeneratorAbove(client: Queryable, schema: string, id: bigint): Promise<void> {
  if (typeof id !== 'bigint' || id < 0n) {
    throw new ShardflakeError('INVALID_ARGUMENT', 'ensureGeneratorAbove needs a non-negative bigint id');
  }
  try {
    await client.query(`SELECT ${qualified(schema, GENERATOR_OBJECTS.catchUp)}($1::bigint)`, [id.toString()]);
  } catch (error) {
    throw wrapGeneratorError(error);
  }
}

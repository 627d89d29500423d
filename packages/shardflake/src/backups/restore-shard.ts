import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { readPlacement } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import { expectString, expectWholeNumber, optionsObject } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { isFenced } from '../fence/fence.js';
import { compareDigests, digestSchemas, type TableDigest } from '../move/verify.js';
import { connect, describeUrl, wrapPgError } from '../postgres/connect.js';
import { copyFrom, copyTo } from '../postgres/copy-streams.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { connectServer } from '../topology/connections.js';

/**
 * One shard's rows back from a backup (an application bug deleted a user's data): the operator restores a server
 * beside the cluster, from its base backup and WAL archive to a restore point or a time, and this copies the
 * shard's tables from there into a side schema on the shard's live home, where the application (or an operator's
 * SQL) takes back what it needs. The live shard is never written.
 *
 * In one transaction on the live home: the side schema; each of the application's tables (not shardflake's own
 * `_shardflake…` ones) as the restored server has it — columns, their types, the primary key; no defaults,
 * triggers or other indexes; every row by binary COPY from one snapshot of the restored server; then per table the
 * row count and checksum on both sides (move/verify.ts) — equal, or nothing is kept. A restored copy that is fenced
 * (the shard had moved away by then) is refused: its rows are not the shard's at that moment.
 */
/** Options of `restoreShard`. */
export interface RestoreShardOptions {
  /** The side schema to create on the live home (default `<shard schema>_restored`); it must not exist. */
  into?: string;
}

/** What `restoreShard` copied and verified. */
export interface RestoredShard {
  /** The logical shard. */
  shard: number;
  /** The shard's schema (on the restored server and on the live home). */
  schema: string;
  /** The live home, where the side schema was made. */
  server: string;
  /** The side schema that holds the restored rows. */
  into: string;
  /** The restored server, password hidden. */
  from: string;
  /** Per table, the rows and checksum (sum of hash_record) found equal on both sides. */
  tables: {
    /** The table's name. */
    table: string;
    /** Its rows, on both sides. */
    rows: bigint;
    /** The sum of its rows' hashes, on both sides. */
    checksum: bigint;
  }[];
  /** How long it took, in ms. */
  ms: number;
}

interface RestoredTable {
  name: string;
  /** `"col" type NOT NULL, …`, quoted, in column order. */
  columns: string;
  primaryKey: string[];
}

const TABLES_SQL = `SELECT c.relname::text AS name,
       (SELECT string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
                          || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END, ', ' ORDER BY a.attnum)
          FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       coalesce((SELECT array_agg(a.attname::text ORDER BY k.ord)
                   FROM pg_index i
                   CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
                  WHERE i.indrelid = c.oid AND i.indisprimary), '{}') AS pk
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
   AND c.relname NOT LIKE '\\_shardflake%'
 ORDER BY c.relname`;

/** `shardflake cluster restore-shard`: see above. */
export async function restoreShard(
  config: ClusterConfig,
  shard: number,
  fromUrl: string,
  options: RestoreShardOptions = {},
): Promise<RestoredShard> {
  const started = performance.now();
  if (shard === undefined) throw new ShardflakeError('INVALID_ARGUMENT', 'restoreShard needs a shard number');
  expectWholeNumber(shard, 'shard', 0);
  expectString(fromUrl, 'the restored server URL');
  optionsObject(options, 'restoreShard options');
  if (options.into !== undefined) expectString(options.into, 'into');
  const from = describeUrl(fromUrl);
  const catalog = await connectServer(config, config.catalog, {
    applicationName: 'shardflake restore-shard',
  });
  let placement: Awaited<ReturnType<typeof readPlacement>>;
  try {
    placement = await readPlacement(catalog, shard);
  } finally {
    await catalog.end().catch(() => {});
  }
  if (placement.state !== 'active')
    throw new ShardflakeError(
      'SHARD_BUSY',
      `shard ${shard} is ${placement.state}; restore its rows once the move has finished`,
    );
  const into = options.into ?? `${placement.schema}_restored`;
  quoteIdent(into, 'schema');
  if (into === placement.schema)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--into must name a new schema, not the shard's own ${into}`,
    );

  const restored = await connect(fromUrl, { applicationName: 'shardflake restore-shard' }).catch(
    (error: ShardflakeError) => {
      throw new ShardflakeError(error.code, `the restored server ${from}: ${error.message}`, {
        cause: error,
      });
    },
  );
  let home: pg.Client | undefined;
  try {
    const tables = await restoredTables(restored, placement.schema, from);
    home = await connectServer(config, placement.server, { applicationName: 'shardflake restore-shard' });
    const taken = await home.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [into]);
    if (taken.rows.length > 0)
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `schema ${into} already exists on server ${placement.server}; drop it or choose another with --into`,
      );
    // One snapshot of the restored server for every table and for its checksums.
    await restored.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    await home.query('BEGIN');
    let digests: TableDigest[];
    try {
      await home.query(`CREATE SCHEMA ${quoteIdent(into, 'schema')}`);
      for (const t of tables) {
        const key = t.primaryKey.length
          ? `, PRIMARY KEY (${t.primaryKey.map((c) => quoteIdent(c)).join(', ')})`
          : '';
        await home.query(`CREATE TABLE ${qualified(into, t.name)} (${t.columns}${key})`);
      }
      for (const t of tables) {
        await pipeline(
          restored.query(copyTo(`COPY ${qualified(placement.schema, t.name)} TO STDOUT (FORMAT binary)`)),
          home.query(copyFrom(`COPY ${qualified(into, t.name)} FROM STDIN (FORMAT binary)`)),
        );
      }
      const names = tables.map((t) => t.name);
      const [[source = []], [copy = []]] = await Promise.all([
        digestSchemas(restored, [{ schema: placement.schema, tables: names }]),
        digestSchemas(home, [{ schema: into, tables: names }]),
      ]);
      const differences = compareDigests(source, copy);
      if (differences.length > 0)
        throw new ShardflakeError(
          'RESTORE_FAILED',
          `the copy of shard ${shard} differs from the restored server's (${differences.join('; ')}); nothing was kept`,
        );
      digests = source;
      await home.query('COMMIT');
    } catch (error) {
      await home.query('ROLLBACK').catch(() => {});
      throw error instanceof ShardflakeError ? error : wrapPgError(error);
    } finally {
      await restored.query('ROLLBACK').catch(() => {});
    }
    return {
      shard,
      schema: placement.schema,
      server: placement.server,
      into,
      from,
      tables: digests.map((d) => ({ table: d.table, rows: d.rows, checksum: d.checksum })),
      ms: Math.round(performance.now() - started),
    };
  } finally {
    await restored.end().catch(() => {});
    await home?.end().catch(() => {});
  }
}

/** The shard's tables on the restored server; refuses a schema that is missing, empty or fenced there. */
async function restoredTables(restored: pg.Client, schema: string, from: string): Promise<RestoredTable[]> {
  const { rows } = await restored.query(TABLES_SQL, [schema]);
  const tables = (rows as { name: string; columns: string; pk: string[] }[]).map((r) => ({
    name: r.name,
    columns: r.columns,
    primaryKey: r.pk,
  }));
  if (tables.length === 0)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `the restored server ${from} has no tables in schema ${schema}: restore the server that held the shard at that moment`,
    );
  if (await isFenced(restored, schema))
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `schema ${schema} on the restored server ${from} is a fenced old copy (the shard had moved away by then): restore the server that held the shard at that moment`,
    );
  return tables;
}

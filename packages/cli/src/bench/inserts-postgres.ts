import type pg from 'pg';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { connect, describeUrl, wrapPgError } from 'shardflake/internal/postgres/connect.js';
import { quoteIdent } from 'shardflake/internal/postgres/identifier.js';
import { installGenerator } from 'shardflake/internal/postgres/install.js';
import { type Counters, type InsertTarget, type TableSizes, tableFor } from './inserts-target.js';
import { GENERATOR_SCHEMA, type IdType } from './inserts-types.js';

/** Rows per bulk statement while preloading (a few MB of parameters at most). */
const PRELOAD_CHUNK = 20_000;

/**
 * The insert benchmark on PostgreSQL over one connection. Every statement of the timed phase is a prepared,
 * single-row, autocommit INSERT; WAL, full-page images and index block reads are read from the server's own
 * statistics around each batch, on the same connection so its pending statistics are flushed first.
 */
export async function postgresTarget(url: string): Promise<InsertTarget> {
  const client = await connect(url, { applicationName: 'shardflake bench inserts' });
  try {
    const info = await client.query<{ version: string; cache: string; sync: string; fpw: string }>(
      `SELECT current_setting('server_version') AS version,
              pg_size_bytes(current_setting('shared_buffers'))::text AS cache,
              current_setting('synchronous_commit') AS sync,
              current_setting('full_page_writes') AS fpw`,
    );
    const row = info.rows[0] as { version: string; cache: string; sync: string; fpw: string };
    const hasFlush = await client
      .query(`SELECT 1 FROM pg_proc WHERE proname = 'pg_stat_force_next_flush'`)
      .then((r) => (r.rowCount ?? 0) > 0);
    const hasFpi = await client
      .query(`SELECT 1 FROM pg_attribute WHERE attrelid = 'pg_stat_wal'::regclass AND attname = 'wal_fpi'`)
      .then((r) => (r.rowCount ?? 0) > 0);
    // pgstattuple gives the leaf fill; created only if missing, and dropped again on close.
    const hadPgstattuple = await client
      .query(`SELECT 1 FROM pg_extension WHERE extname = 'pgstattuple'`)
      .then((r) => (r.rowCount ?? 0) > 0);
    const createdPgstattuple =
      !hadPgstattuple &&
      (await client
        .query('CREATE EXTENSION pgstattuple')
        .then(() => true)
        .catch(() => false));
    return new PostgresTarget(client, {
      description: `PostgreSQL ${row.version} at ${describeUrl(url)} (shared_buffers ${Math.round(Number(row.cache) / 2 ** 20)} MB, synchronous_commit=${row.sync}, full_page_writes=${row.fpw})`,
      cacheBytes: Number(row.cache),
      hasFlush,
      hasFpi,
      hasPgstattuple: hadPgstattuple || createdPgstattuple,
      createdPgstattuple,
    });
  } catch (error) {
    await client.end().catch(() => {});
    throw wrapPgError(error, url);
  }
}

interface Features {
  description: string;
  cacheBytes: number;
  hasFlush: boolean;
  hasFpi: boolean;
  hasPgstattuple: boolean;
  createdPgstattuple: boolean;
}

class PostgresTarget implements InsertTarget {
  readonly engine = 'postgres' as const;
  readonly description: string;
  readonly cacheBytes: number;
  private readonly created = new Set<string>();
  private createdGenerator = false;

  constructor(
    private readonly client: pg.Client,
    private readonly features: Features,
  ) {
    this.description = features.description;
    this.cacheBytes = features.cacheBytes;
  }

  private async run<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string | pg.QueryConfig,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    try {
      return typeof text === 'string'
        ? await this.client.query<R>(text, values)
        : await this.client.query<R>(text);
    } catch (error) {
      throw wrapPgError(error);
    }
  }

  async prepare(type: IdType): Promise<void> {
    const table = quoteIdent(tableFor(type));
    if (type.name === 'instagram' && !this.createdGenerator) {
      const { rowCount } = await this.run('SELECT 1 FROM pg_namespace WHERE nspname = $1', [
        GENERATOR_SCHEMA,
      ]);
      if (rowCount) {
        throw new ShardflakeError(
          'INVALID_ARGUMENT',
          `schema ${GENERATOR_SCHEMA} already exists on this server (left by a killed run? DROP SCHEMA ${GENERATOR_SCHEMA} CASCADE); the benchmark will not touch it`,
        );
      }
      await installGenerator(this.client, { schema: GENERATOR_SCHEMA, shard: 1 });
      this.createdGenerator = true;
    }
    await this.run(`DROP TABLE IF EXISTS ${table}`);
    this.created.add(table);
    // autovacuum off: a vacuum starting in one type's table mid-run would charge its I/O to whichever type runs.
    await this.run(
      `CREATE TABLE ${table} (id ${type.pgColumn}, n bigint NOT NULL) WITH (autovacuum_enabled = off)`,
    );
  }

  async preload(type: IdType, rows: number): Promise<void> {
    const table = quoteIdent(tableFor(type));
    for (let done = 0; done < rows; done += PRELOAD_CHUNK) {
      const count = Math.min(PRELOAD_CHUNK, rows - done);
      if (type.source === 'server') {
        await this.run(`INSERT INTO ${table} (n) SELECT generate_series($1::bigint, $2::bigint)`, [
          -rows + done,
          -rows + done + count - 1,
        ]);
        continue;
      }
      const make = type.pgValue as () => unknown;
      const keys = Array.from({ length: count }, make);
      const ns = Array.from({ length: count }, (_, i) => -rows + done + i);
      await this.run(
        `INSERT INTO ${table} (id, n) SELECT * FROM unnest($1::${type.pgArrayType}[], $2::bigint[])`,
        [keys, ns],
      );
    }
  }

  async checkpoint(): Promise<void> {
    await this.run('CHECKPOINT');
  }

  key(type: IdType): unknown {
    return type.source === 'server' ? undefined : (type.pgValue as () => unknown)();
  }

  insert(type: IdType, n: number, key: unknown): Promise<void> {
    const table = tableFor(type);
    const config: pg.QueryConfig =
      type.source === 'server'
        ? { name: `ins_${table}`, text: `INSERT INTO ${quoteIdent(table)} (n) VALUES ($1)`, values: [n] }
        : {
            name: `ins_${table}`,
            text: `INSERT INTO ${quoteIdent(table)} (id, n) VALUES ($1, $2)`,
            values: [key, n],
          };
    return this.run(config).then(() => undefined);
  }

  async counters(): Promise<Counters> {
    // Statistics a backend gathers are pending until it flushes them (at most once a second otherwise).
    if (this.features.hasFlush) await this.run('SELECT pg_stat_force_next_flush()');
    const fpi = this.features.hasFpi ? '(SELECT wal_fpi FROM pg_stat_wal)' : 'NULL::bigint';
    const { rows } = await this.run<{ wal: string; fpi: string | null; read: string; hit: string }>(
      `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text AS wal, ${fpi}::text AS fpi,
              coalesce(sum(idx_blks_read), 0)::text AS read, coalesce(sum(idx_blks_hit), 0)::text AS hit
       FROM pg_statio_user_indexes WHERE relname LIKE 'bench\\_%'`,
    );
    const row = rows[0] as { wal: string; fpi: string | null; read: string; hit: string };
    return {
      logBytes: Number(row.wal),
      ...(row.fpi === null ? {} : { fullPageImages: Number(row.fpi) }),
      blocksRead: Number(row.read),
      blocksHit: Number(row.hit),
    };
  }

  async sizes(type: IdType): Promise<TableSizes> {
    const density = this.features.hasPgstattuple
      ? '(SELECT avg_leaf_density FROM pgstatindex(i.indexrelid::regclass))'
      : 'NULL::float8';
    const { rows } = await this.run<{ index: string; table: string; density: number | null }>(
      `SELECT pg_relation_size(i.indexrelid)::text AS index, pg_relation_size(i.indrelid)::text AS table,
              ${density} AS density
       FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisprimary`,
      [quoteIdent(tableFor(type))],
    );
    const row = rows[0] as { index: string; table: string; density: number | null };
    return {
      indexBytes: Number(row.index),
      tableBytes: Number(row.table),
      ...(row.density === null ? {} : { leafDensity: Number(row.density) }),
    };
  }

  async close(): Promise<void> {
    for (const table of this.created) await this.run(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
    if (this.createdGenerator)
      await this.run(`DROP SCHEMA ${quoteIdent(GENERATOR_SCHEMA)} CASCADE`).catch(() => {});
    if (this.features.createdPgstattuple) await this.run('DROP EXTENSION pgstattuple').catch(() => {});
    await this.client.end().catch(() => {});
  }
}

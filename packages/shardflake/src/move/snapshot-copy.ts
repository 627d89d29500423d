import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { ShardflakeError } from '../errors/errors.js';
import { connect, loadPg, wrapPgError } from '../postgres/connect.js';
import { copyFrom, copyTo } from '../postgres/copy-streams.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { CopyMeter, meteredCopy, type Throttle } from './copy-stream.js';

/**
 * The initial copy of a set of shards, done by the move itself instead of by the subscription's table-sync
 * workers: one replication slot is created on the source with an exported snapshot, every table of every shard
 * of the set is copied as of that snapshot (binary `COPY … TO STDOUT` piped into `COPY … FROM STDIN`, a few tables
 * at a time), and the subscription is then created on that slot with `copy_data = false`, so it streams exactly
 * the changes made after the snapshot.
 *
 * Why not the subscription's own copy: it starts one table-sync worker per table (two at a time by default), each
 * with its own temporary slot and a wait for the apply worker; for a set of hundreds of small tables that costs
 * more than the rows, and before PostgreSQL 16 the launcher starts workers at most once per
 * `wal_retrieve_retry_interval` (5 s). Copying ourselves needs no worker start at all, streams at the speed of a
 * plain COPY pipe, counts rows for progress, and can be throttled.
 */
export interface CopyTable {
  schema: string;
  table: string;
}

export interface SnapshotCopyOptions {
  sourceUrl: string;
  targetUrl: string;
  slot: string;
  tables: readonly CopyTable[];
  /** Parallel table copies (each one source and one target connection). */
  workers: number;
  throttle?: Throttle;
  onProgress?: (rows: number, bytes: number) => void;
  /** Checked between tables: a true return stops the copy (the move was interrupted). */
  stopped?: () => boolean;
}

export interface SnapshotCopyResult {
  /** Rows copied per table, by `schema.table`. */
  perTable: Map<string, number>;
  rows: number;
  bytes: number;
  ms: number;
}

/**
 * Creates the logical replication slot `slot` (pgoutput) on the source with an exported snapshot, over a
 * replication connection that must stay open and idle until every copy session has imported the snapshot.
 */
export async function createSlotWithSnapshot(
  sourceUrl: string,
  slot: string,
  applicationName = 'shardflake move slot',
): Promise<{ connection: pg.Client; snapshot: string; consistentPoint: string }> {
  const connection = new (loadPg().Client)({
    connectionString: sourceUrl,
    replication: 'database',
    application_name: applicationName,
    connectionTimeoutMillis: 5000,
  } as pg.ClientConfig);
  connection.on('error', () => {});
  try {
    await connection.connect();
    const { rows } = await connection.query(
      `CREATE_REPLICATION_SLOT ${quoteIdent(slot)} LOGICAL pgoutput (SNAPSHOT 'export')`,
    );
    const row = rows[0] as { snapshot_name: string; consistent_point: string };
    return { connection, snapshot: row.snapshot_name, consistentPoint: row.consistent_point };
  } catch (error) {
    await connection.end().catch(() => {});
    throw wrapPgError(error, sourceUrl);
  }
}

export async function copyAtSnapshot(o: SnapshotCopyOptions): Promise<SnapshotCopyResult> {
  const started = performance.now();
  const meter = new CopyMeter(o.throttle);
  const perTable = new Map<string, number>();
  const { connection, snapshot } = await createSlotWithSnapshot(o.sourceUrl, o.slot);
  const open: pg.Client[] = [connection];
  try {
    const workers = Math.max(1, Math.min(o.workers, o.tables.length));
    const pairs: { source: pg.Client; target: pg.Client }[] = [];
    for (let i = 0; i < workers; i++) {
      const source = await connect(o.sourceUrl, { applicationName: 'shardflake move copy' });
      open.push(source);
      const target = await connect(o.targetUrl, { applicationName: 'shardflake move copy' });
      open.push(target);
      await source.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      await source.query(`SET TRANSACTION SNAPSHOT '${snapshot.replace(/'/g, "''")}'`);
      // The target copy is fenced while it fills; replica mode skips its (ordinary) triggers, as the subscription's
      // own workers do.
      await target.query('SET session_replication_role = replica');
      pairs.push({ source, target });
    }
    // Every copy session holds the snapshot now; the slot's connection is no longer needed.
    await connection.end().catch(() => {});
    let next = 0;
    await Promise.all(
      pairs.map(async ({ source, target }) => {
        for (;;) {
          if (o.stopped?.()) return;
          const t = o.tables[next++];
          if (!t) return;
          const name = qualified(t.schema, t.table);
          const reader = source.query(copyTo(`COPY ${name} TO STDOUT (FORMAT binary)`));
          const writer = target.query(copyFrom(`COPY ${name} FROM STDIN (FORMAT binary)`));
          const meterStream = meteredCopy(meter);
          await pipeline(reader, meterStream, writer);
          perTable.set(`${t.schema}.${t.table}`, meterStream.counter.rows);
          o.onProgress?.(meter.rows, meter.bytes);
        }
      }),
    );
    await Promise.all(pairs.map(({ source }) => source.query('COMMIT')));
    return { perTable, rows: meter.rows, bytes: meter.bytes, ms: performance.now() - started };
  } catch (error) {
    throw error instanceof ShardflakeError ? error : wrapPgError(error);
  } finally {
    await Promise.all(open.map((c) => c.end().catch(() => {})));
  }
}

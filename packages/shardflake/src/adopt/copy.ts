import type pg from 'pg';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { entryTable } from '../lookups/ddl.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { copyFrom, copyTo } from '../postgres/copy-streams.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import { ShardSplitter, type SplitBuffers } from './copy-split.js';
import { type AdoptModel, placementSql, type TableModel } from './model.js';
import type { Targets } from './targets.js';

/**
 * The copy: every adopted table read once from the source at the slot's exported snapshot (`COPY (SELECT shard,
 * columns…) TO STDOUT`, text format, the shard computed by the source through the placement joins), split by
 * shard in this process (copy-split.ts), and written with `COPY … FROM STDIN` into each shard's table, its old-id
 * entries and its lookups' entries, several COPYs per server at a time. Reference tables are copied whole to every
 * server. Lookup entries are written as rows of a COPY like the rest, so they fill at copy speed.
 *
 * Targets run in `session_replication_role = replica`: the shards' lookup capture triggers and foreign keys stay
 * quiet (the copy writes the entries itself, and the source's foreign keys held at the snapshot). Each COPY
 * commits on its own; a run killed during the copy leaves a partial copy that the next run empties before
 * copying again (the snapshot died with the run, see run.ts).
 */
export interface CopyProgress {
  table: string;
  rows: number;
  /** All tables' rows so far, and the source's estimate of all of them. */
  done: number;
  total: number;
}

export interface CopyOptions {
  snapshot: string;
  /** Tables copied at once (each one source connection). */
  workers: number;
  onProgress?: (p: CopyProgress) => void;
  onTableDone?: (table: string, rows: number) => Promise<void>;
  stopped?: () => boolean;
}

/** How many bytes of split rows one table holds in memory before they are written out. */
const FLUSH_BYTES = 64_000_000;

async function sourceSession(url: string, snapshot: string): Promise<pg.Client> {
  const client = await connect(url, { applicationName: 'shardflake adopt copy' });
  await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  await client.query(`SET TRANSACTION SNAPSHOT ${quoteLiteral(snapshot)}`);
  return client;
}

/** Writes `lines` into `table` (its `columns`) of `schema` on a connection of `server`. */
async function copyLines(
  targets: Targets,
  server: string,
  schema: string,
  table: string,
  columns: readonly string[],
  lines: readonly string[],
): Promise<void> {
  if (lines.length === 0) return;
  await targets.withCopier(server, async (client) => {
    const stream = client.query(
      copyFrom(
        `COPY ${qualified(schema, table)} (${columns.map((c) => quoteIdent(c)).join(', ')}) FROM STDIN`,
      ),
    );
    await new Promise<void>((resolve, reject) => {
      stream.on('error', reject);
      stream.on('finish', resolve);
      // One write per 1,000 lines keeps memory of the joined text small.
      for (let i = 0; i < lines.length; i += 1000) stream.write(`${lines.slice(i, i + 1000).join('\n')}\n`);
      stream.end();
    });
  });
}

async function flush(targets: Targets, t: TableModel, split: SplitBuffers): Promise<void> {
  const jobs: Promise<void>[] = [];
  for (const [shard, lines] of split.rows) {
    const p = targets.placement(shard);
    jobs.push(copyLines(targets, p.server, p.schema, t.name, t.columns, lines));
  }
  for (const [shard, lines] of split.entries) {
    const p = targets.placement(shard);
    jobs.push(copyLines(targets, p.server, p.schema, OLD_IDS_TABLE, ['tbl', 'id', 'shard'], lines));
  }
  for (const [lookup, byShard] of split.lookupEntries) {
    for (const [shard, lines] of byShard) {
      const p = targets.placement(shard);
      jobs.push(copyLines(targets, p.server, p.schema, entryTable(lookup), ['value', 'id'], lines));
    }
  }
  const settled = await Promise.allSettled(jobs);
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/** One sharded table: read at the snapshot with each row's shard, split, written out. */
async function copySharded(
  model: AdoptModel,
  targets: Targets,
  source: pg.Client,
  t: TableModel,
  counted: (rows: number) => void,
): Promise<number> {
  const { shard, from } = placementSql(model, t.name);
  const columns = t.columns.map((c) => `t.${quoteIdent(c)}`).join(', ');
  const split = new ShardSplitter({
    logicalShards: model.logicalShards,
    idColumn: Math.max(0, t.columns.indexOf(t.entryId ?? 'id')),
    ...(t.entryId !== undefined ? { entries: t.name } : {}),
    lookups: t.lookups.map((l) => ({ name: l.name, column: t.columns.indexOf(l.column) })),
  });
  const reader = source.query(copyTo(`COPY (SELECT ${shard}, ${columns} FROM ${from}) TO STDOUT`));
  let before = 0;
  // Double buffering: the split rows are written while the next ones are read and split.
  let writing: Promise<void> = Promise.resolve();
  for await (const chunk of reader) {
    split.push((chunk as Buffer).toString('utf8'));
    counted(split.count - before);
    before = split.count;
    if (split.bytes > FLUSH_BYTES) {
      await writing;
      writing = flush(targets, t, split.take());
      writing.catch(() => {});
    }
  }
  await writing;
  await flush(targets, t, split.take());
  return split.count;
}

/** One reference table: the same COPY text to every server's reference schema. */
async function copyReference(
  model: AdoptModel,
  targets: Targets,
  source: pg.Client,
  t: TableModel,
  counted: (rows: number) => void,
): Promise<number> {
  const columns = t.columns.map((c) => quoteIdent(c)).join(', ');
  const reader = source.query(copyTo(`COPY ${qualified(model.adopt.schema, t.name)} (${columns}) TO STDOUT`));
  const lines: string[] = [];
  let tail = '';
  for await (const chunk of reader) {
    const text = tail + (chunk as Buffer).toString('utf8');
    const parts = text.split('\n');
    tail = parts.pop() as string;
    lines.push(...parts);
    counted(parts.length);
  }
  await Promise.all(
    targets.servers.map((server) => copyLines(targets, server, REFERENCE_SCHEMA, t.name, t.columns, lines)),
  );
  return lines.length;
}

/** Copies every table of the model at `snapshot`; returns the rows copied per table. */
export async function copyTables(
  model: AdoptModel,
  targets: Targets,
  o: CopyOptions,
): Promise<Map<string, number>> {
  const total = model.order.reduce((n, name) => n + Number(model.tables.get(name)?.estimate ?? 0n), 0);
  let done = 0;
  const perTable = new Map<string, number>();
  const queue = [...model.order];
  const sessions: pg.Client[] = [];
  try {
    const workers = Math.max(1, Math.min(o.workers, queue.length));
    for (let i = 0; i < workers; i++) sessions.push(await sourceSession(model.adopt.from, o.snapshot));
    await Promise.all(
      sessions.map(async (source) => {
        for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
          if (o.stopped?.()) return;
          const t = model.tables.get(name) as TableModel;
          let rows = 0;
          const counted = (n: number) => {
            rows += n;
            done += n;
            o.onProgress?.({ table: name, rows, done, total: Math.max(total, done) });
          };
          const copied =
            t.kind === 'sharded'
              ? await copySharded(model, targets, source, t, counted)
              : await copyReference(model, targets, source, t, counted);
          perTable.set(name, copied);
          await o.onTableDone?.(name, copied);
        }
      }),
    );
    return perTable;
  } catch (error) {
    throw error instanceof ShardflakeError ? error : wrapPgError(error);
  } finally {
    await Promise.all(sessions.map((c) => c.end().catch(() => {})));
  }
}

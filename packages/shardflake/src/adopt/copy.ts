import { once } from 'node:events';
import type { Writable } from 'node:stream';
import type pg from 'pg';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { entryTable } from '../lookups/ddl.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { copyFrom, copyTo } from '../postgres/copy-streams.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import { DIGEST_ALL } from '../reference/sql.js';
import { APPLIED_SCHEMA } from './apply.js';
import { ShardSplitter } from './copy-split.js';
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

/**
 * One server's side of a sharded table's copy: a staging table per kind of line (rows, old-id entries, each
 * lookup's entries) in `shardflake_adopt`, filled by one COPY each while the source is read, then spread into the
 * shards by the server itself (one INSERT … SELECT per shard, by an index on the shard column). One COPY per server
 * instead of one per shard: the round trips of a thousand small COPYs were most of the copy's time.
 */
class Stage {
  private readonly streams = new Map<string, Writable>();
  private readonly done: Promise<void>[] = [];
  /** One connection per staging table's COPY. */
  readonly writers: pg.Client[] = [];

  private constructor(
    readonly server: string,
    readonly client: pg.Client,
    private readonly names: { kind: string; table: string }[],
  ) {}

  static async open(targets: Targets, server: string, t: TableModel): Promise<Stage> {
    const client = await targets.connect(server, 'shardflake adopt copy', true);
    try {
      const any = targets.shardsOn(server)[0] as { schema: string };
      const rows = stageName(t.name, 'rows');
      const statements = [
        `DROP TABLE IF EXISTS ${rows}`,
        `CREATE UNLOGGED TABLE ${rows} AS SELECT NULL::integer AS shard, t.* FROM ${qualified(any.schema, t.name)} t WITH NO DATA`,
      ];
      const names = [{ kind: 'rows', table: rows }];
      if (t.entryId !== undefined) {
        const entries = stageName(t.name, 'entries');
        statements.push(
          `DROP TABLE IF EXISTS ${entries}`,
          `CREATE UNLOGGED TABLE ${entries} (entry_shard integer, tbl text, id bigint, shard integer)`,
        );
        names.push({ kind: 'entries', table: entries });
      }
      for (const l of t.lookups) {
        const lookup = stageName(l.name, 'lookup');
        statements.push(
          `DROP TABLE IF EXISTS ${lookup}`,
          `CREATE UNLOGGED TABLE ${lookup} (entry_shard integer, value text, id bigint)`,
        );
        names.push({ kind: `lookup:${l.name}`, table: lookup });
      }
      await client.query(statements.join(';\n'));
      const stage = new Stage(server, client, names);
      for (const n of names) {
        // A connection runs one COPY at a time: each staging table gets its own.
        const writer = await targets.connect(server, 'shardflake adopt copy', true);
        stage.writers.push(writer);
        const stream = writer.query(copyFrom(`COPY ${n.table} FROM STDIN`)) as unknown as Writable;
        stage.streams.set(n.kind, stream);
        const done = new Promise<void>((resolve, reject) => {
          stream.on('error', reject);
          stream.on('finish', resolve);
        });
        // A failure shows when the stage finishes; until then writes only wait for drain.
        done.catch(() => {});
        stage.done.push(done);
      }
      return stage;
    } catch (error) {
      await client.end().catch(() => {});
      throw error;
    }
  }

  /** Writes lines of one kind; resolves when the stream can take more. */
  async write(kind: string, lines: readonly string[]): Promise<void> {
    if (lines.length === 0) return;
    const stream = this.streams.get(kind) as Writable;
    if (!stream.write(`${lines.join('\n')}\n`)) await once(stream, 'drain');
  }

  /** Ends the COPYs, then spreads every staged line into its shard and drops the staging tables. */
  async finish(t: TableModel, shards: readonly { shard: number; schema: string }[]): Promise<void> {
    for (const stream of this.streams.values()) stream.end();
    await Promise.all(this.done);
    if (shards.length === 0) return;
    const pairs = shards.map((p) => `(${p.shard}, ${quoteLiteral(p.schema)})`).join(', ');
    const list = (columns: readonly string[]) => quoteLiteral(columns.map((c) => quoteIdent(c)).join(', '));
    const spread = (table: string, key: string, target: string, columns: readonly string[]) =>
      `CREATE INDEX ON ${table} (${key});
DO $adopt$
DECLARE r record;
BEGIN
  FOR r IN SELECT * FROM (VALUES ${pairs}) v(s, n) LOOP
    EXECUTE format('INSERT INTO %I.%I (%s) SELECT %s FROM %s WHERE ${key} = $1', r.n, ${quoteLiteral(target)}, ${list(columns)}, ${list(columns)}, ${quoteLiteral(table)}) USING r.s;
  END LOOP;
END
$adopt$;
DROP TABLE ${table}`;
    const statements = this.names.map((n) =>
      n.kind === 'rows'
        ? spread(n.table, 'shard', t.name, t.columns)
        : n.kind === 'entries'
          ? spread(n.table, 'entry_shard', OLD_IDS_TABLE, ['tbl', 'id', 'shard'])
          : spread(n.table, 'entry_shard', entryTable(n.kind.slice('lookup:'.length)), ['value', 'id']),
    );
    await this.client.query(statements.join(';\n'));
  }
}

/** A staging table's qualified name in `shardflake_adopt`. */
function stageName(name: string, kind: string): string {
  return qualified(APPLIED_SCHEMA, `${kind}_${name}`.slice(0, 63));
}

/** One sharded table: read at the snapshot with each row's shard, routed to each server's staging, spread there. */
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
    serverOf: (n) => targets.placement(n).server,
    idColumn: Math.max(0, t.columns.indexOf(t.entryId ?? 'id')),
    ...(t.entryId !== undefined ? { entries: t.name } : {}),
    lookups: t.lookups.map((l) => ({ name: l.name, column: t.columns.indexOf(l.column) })),
  });
  const stages = new Map<string, Stage>();
  try {
    for (const server of targets.servers) stages.set(server, await Stage.open(targets, server, t));
    const reader = source.query(copyTo(`COPY (SELECT ${shard}, ${columns} FROM ${from}) TO STDOUT`));
    let before = 0;
    for await (const chunk of reader) {
      const lines = split.push((chunk as Buffer).toString('utf8'));
      const writes: Promise<void>[] = [];
      for (const [server, list] of lines.rows) writes.push((stages.get(server) as Stage).write('rows', list));
      for (const [server, list] of lines.entries)
        writes.push((stages.get(server) as Stage).write('entries', list));
      for (const [lookup, byServer] of lines.lookupEntries)
        for (const [server, list] of byServer)
          writes.push((stages.get(server) as Stage).write(`lookup:${lookup}`, list));
      await Promise.all(writes);
      counted(split.count - before);
      before = split.count;
    }
    await Promise.all([...stages.values()].map((stage) => stage.finish(t, targets.shardsOn(stage.server))));
    return split.count;
  } finally {
    await Promise.all(
      [...stages.values()].flatMap((stage) =>
        [stage.client, ...stage.writers].map((c) => c.end().catch(() => {})),
      ),
    );
  }
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
    targets.servers.map(async (server) => {
      await copyLines(targets, server, REFERENCE_SCHEMA, t.name, t.columns, lines);
      // COPY in replica mode skips the digest triggers: the digests are recomputed from the rows (reference/sql.ts).
      await targets.withCopier(server, (client) => client.query(`SELECT ${DIGEST_ALL}`));
    }),
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

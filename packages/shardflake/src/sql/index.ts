/*
 * sql/: SQL across all shards (`router.sql`): parsed by PostgreSQL's own parser, planned as a small tree of
 * primitives (one file each), sent as statements of a bounded number of shards each and combined in the router.
 *
 * May import: errors, postgres, config, telemetry, routing.
 */
import { expectArray, expectKind, expectWholeNumber, optionsObject } from '../errors/arguments.js';
import { loadPg } from '../postgres/connect.js';
import type { RouterContext } from '../routing/context.js';
import type { MapState } from '../routing/map.js';
import { sqlStateOf } from '../routing/retry.js';
import type { Row } from '../routing/rows.js';
import { type OperationTrace, traced } from '../telemetry/trace.js';
import { accumulate, finalOid, finish, type Group, newStates } from './aggregate.js';
import { distinctRows } from './distinct.js';
import { evaluateHaving } from './having.js';
import { cut, resolveCut } from './limit.js';
import { concatenate, mergeSorted } from './merge.js';
import { type GroupsPlan, type Plan, planQuery, type RowsPlan } from './plan.js';
import { namingFor, type PieceNaming } from './prepared.js';
import {
  type Column,
  openServerStream,
  pieceStatements,
  runPieces,
  type ServerRows,
  type ServerStream,
  sortsByCodePoint,
} from './route.js';
import { comparator } from './sort.js';
import { type Cell, equalityKey, needsCollation } from './values.js';

/**
 * `router.sql(text, values)` and `router.sqlStream(text, values)`: one SELECT over every shard, answered as one
 * database holding all the shards' rows would answer it, or refused with UNSUPPORTED_QUERY (see plan.ts for the
 * two shapes of plan, check.ts and from.ts for what is refused, docs/sql.md for the grammar).
 *
 * Not one snapshot: each statement answers from its own, and a server's shards are read by statements of at most
 * `sqlShardsPerStatement` shards each (route.ts), every shard whole in one of them. A query that races a shard
 * move and finds a schema gone runs again on the new map (at most 3 times), as scatter reads do; a stream only
 * before its first row leaves (see openStreams).
 */
export interface SqlColumn {
  /** The column's name in the answer, as PostgreSQL names it (its alias, or `count` for `count(*)`). */
  name: string;
  /** PostgreSQL type OID. */
  type: number;
}

/** The answer of `router.sql`: the rows and the columns' names and types, as one table would give them. */
export interface SqlResult {
  /** The answer's rows, each an object keyed by column name with values parsed as pg parses them. */
  rows: Row[];
  /** The answer's columns in SELECT order (the order of each row's keys). */
  columns: SqlColumn[];
}

/** Options of `router.sql`. */
export interface SqlOptions {
  /**
   * Whether each piece's statement goes as a named prepared statement, planned once per pooled connection: true
   * always, false never; left out, the router's `sqlPrepare` decides (default 'auto': from a query text's second
   * call on, falling back to unnamed statements on a server whose pooler cannot carry them; see sql/prepared.ts).
   * With true, a pooler in transaction mode that loses named statements fails the call.
   */
  prepare?: boolean;
}

/** Options of `router.sqlStream`. */
export interface SqlStreamOptions {
  /** Rows fetched per server per round trip (default 1000). */
  batchSize?: number;
}

const PLAN_CACHE_SIZE = 100;

/** A query text's plan and how many times the router was asked to run it (sqlPrepare 'auto' counts). */
interface Planned {
  readonly plan: Promise<Plan>;
  calls: number;
}
const plans = new WeakMap<RouterContext, Map<string, Planned>>();

/**
 * Plans are kept per router by query text (the text and the router's reference tables are the whole input of
 * planning; values are not), with the count of calls of the text, this one included.
 */
function planFor(ctx: RouterContext, text: string): Planned {
  let cache = plans.get(ctx);
  if (!cache) {
    cache = new Map();
    plans.set(ctx, cache);
  }
  let planned = cache.get(text);
  if (!planned) {
    const plan = planQuery(text, ctx.referenceTables ?? new Set());
    plan.catch(() => cache?.delete(text));
    if (cache.size >= PLAN_CACHE_SIZE) cache.delete(cache.keys().next().value as string);
    planned = { plan, calls: 0 };
    cache.set(text, planned);
  }
  planned.calls++;
  return planned;
}

const MISSING_RELATION = ['42P01', '3F000'];
const ATTEMPTS = 3;

async function runBuffered(
  ctx: RouterContext,
  plan: GroupsPlan | RowsPlan,
  values: readonly unknown[],
  trace: OperationTrace | undefined,
  naming: PieceNaming,
): Promise<ServerRows[]> {
  for (let attempt = 1; ; attempt++) {
    const map = await ctx.map.fresh();
    try {
      const pieces = pieceStatements(plan, map, ctx.sqlPieces, trace);
      return await runPieces(ctx, pieces, values, trace, naming, ctx.sqlPieces.connectionsPerServer);
    } catch (error) {
      if (!(await movedAway(ctx, error, map, attempt))) throw error;
      trace?.retryReasons.push('unknown-table');
    }
  }
}

/**
 * Whether a failed attempt may run again on a newer map: its error says a table or schema is not there (42P01,
 * 3F000), and the map, re-read, has changed since the attempt read it — a shard moved away under the old map (and
 * its old copy was dropped). A table that is simply missing is the caller's error, reported at once.
 */
async function movedAway(
  ctx: RouterContext,
  error: unknown,
  map: MapState,
  attempt: number,
): Promise<boolean> {
  const state = sqlStateOf(error);
  if (attempt >= ATTEMPTS || state === undefined || !MISSING_RELATION.includes(state)) return false;
  ctx.map.markStale();
  return (await ctx.map.fresh()).version !== map.version;
}

function parserFor(oid: number): (text: string) => unknown {
  if (oid === 20) return (v) => BigInt(v);
  if (oid === 1016) {
    const parse = (loadPg().types.getTypeParser as (oid: number) => (v: string) => (string | null)[])(1016);
    return (v) => parse(v).map((x) => (x === null ? null : BigInt(x)));
  }
  return (loadPg().types.getTypeParser as (oid: number, format: string) => (text: string) => unknown)(
    oid,
    'text',
  );
}

function projector(columns: readonly { name: string; oid: number }[]): (cells: Cell[]) => Row {
  const parsers = columns.map((c) => parserFor(c.oid));
  return (cells) => {
    const row: Row = {};
    columns.forEach((c, i) => {
      const cell = cells[i] ?? null;
      row[c.name] = cell === null ? null : (parsers[i] as (text: string) => unknown)(cell);
    });
    return row;
  };
}

async function codePointText(
  ctx: RouterContext,
  servers: Iterable<string>,
  oids: number[],
): Promise<boolean> {
  if (!oids.some(needsCollation)) return true;
  const answers = await Promise.all([...new Set(servers)].map((s) => sortsByCodePoint(ctx, s)));
  return answers.every(Boolean);
}

interface Source {
  next(): Promise<Cell[] | undefined>;
}

function arraySource(rows: Cell[][]): Source {
  let at = 0;
  return { next: async () => rows[at++] };
}

/** The rows plan over sources (buffered arrays or server streams): merge or concatenate, distinct, cut. */
async function rowsPipeline(
  ctx: RouterContext,
  plan: RowsPlan,
  servers: string[],
  columns: Column[],
  sources: Source[],
  values: readonly unknown[],
): Promise<{ rows: AsyncIterable<Cell[]>; columns: Column[] }> {
  const visible = columns.length - plan.hidden;
  const keys = plan.sort.map((k) => {
    const index = k.hidden ? visible + k.column : k.column;
    return { index, oid: columns[index]?.oid as number, descending: k.descending, nullsFirst: k.nullsFirst };
  });
  const ordered = keys.length > 0;
  const compare = comparator(
    keys,
    ordered
      ? await codePointText(
          ctx,
          servers,
          keys.map((k) => k.oid),
        )
      : true,
  );
  let rows: AsyncIterable<Cell[]> = ordered ? mergeSorted(sources, compare) : concatenate(sources);
  if (plan.distinct) {
    const oids = columns.map((c) => c.oid);
    rows = distinctRows(rows, visible, () => oids);
  }
  return { rows: cut(rows, resolveCut(plan.limits, values)), columns: columns.slice(0, visible) };
}

/** The groups plan: combine every part, then HAVING, DISTINCT, ORDER BY, LIMIT on the combined groups. */
async function groupsAnswer(
  ctx: RouterContext,
  plan: GroupsPlan,
  answers: ServerRows[],
  values: readonly unknown[],
): Promise<{ rows: Cell[][]; columns: Column[] }> {
  const columns = answers[0]?.columns ?? [];
  const oids = columns.map((c) => c.oid);
  const finalOids = plan.finals.map((f) =>
    f.from === 'column' ? (oids[f.column] as number) : finalOid(plan.slots[f.slot] as never, oids),
  );
  const textOrder = [
    ...plan.slots
      .filter((s) => s.kind === 'min' || s.kind === 'max')
      .map((s) => oids[s.columns[0] as number] as number),
    ...plan.sort.map((k) => finalOids[k.column] as number),
    ...(plan.having ? finalOids : []),
  ];
  const codePoint = await codePointText(
    ctx,
    answers.map((a) => a.server),
    textOrder,
  );
  const groups = new Map<string, Group>();
  for (const answer of answers) {
    for (const row of answer.rows) {
      const key = JSON.stringify(plan.keys.map((k) => equalityKey(row[k] ?? null, oids[k] as number)));
      let group = groups.get(key);
      if (!group) {
        group = { row, states: newStates(plan.slots) };
        groups.set(key, group);
      }
      accumulate(plan.slots, group.states, row, oids, codePoint);
    }
  }
  let rows: Cell[][] = [];
  for (const group of groups.values()) {
    const cells = plan.finals.map((f, i) =>
      f.from === 'column'
        ? (group.row[f.column] ?? null)
        : finish(group.states[f.slot] as never, finalOids[i] as number),
    );
    if (
      plan.having &&
      evaluateHaving(plan.having, { cells, oids: finalOids, values, codePointText: codePoint }) !== true
    )
      continue;
    rows.push(cells);
  }
  const names = plan.finals.map((f) => (f.from === 'column' ? (columns[f.column]?.name as string) : f.name));
  const finalColumns = names.map((name, i) => ({ name, oid: finalOids[i] as number }));
  let stream: AsyncIterable<Cell[]> = fromArray(rows);
  if (plan.distinct) stream = distinctRows(stream, plan.outputs, () => finalOids);
  if (plan.sort.length > 0) {
    rows = [];
    for await (const row of stream) rows.push(row);
    rows.sort(
      comparator(
        plan.sort.map((k) => ({ index: k.column, oid: finalOids[k.column] as number, ...k })),
        codePoint,
      ),
    );
    stream = fromArray(rows);
  }
  const out: Cell[][] = [];
  for await (const row of cut(stream, resolveCut(plan.limits, values))) out.push(row.slice(0, plan.outputs));
  return { rows: out, columns: finalColumns.slice(0, plan.outputs) };
}

async function* fromArray<T>(rows: T[]): AsyncGenerator<T> {
  yield* rows;
}

let turn = 0;

/**
 * The server that answers a query on reference tables alone: each server holding shards in turn. A server holds a
 * synced copy of the reference tables before any shard is placed on it (reference/copy.ts); one that holds no
 * shard may still be filling its copy.
 */
function onceServer(map: MapState): string {
  const servers = [...new Set(map.shards.map((s) => s.server))];
  turn = (turn + 1) % servers.length;
  return servers[turn] as string;
}

const toColumns = (columns: Column[]): SqlColumn[] => columns.map((c) => ({ name: c.name, type: c.oid }));

export async function runSql(
  ctx: RouterContext,
  text: string,
  values: readonly unknown[] = [],
  options: SqlOptions = {},
): Promise<SqlResult> {
  expectArray(values, 'sql values');
  optionsObject(options, 'sql options');
  expectKind(options.prepare, 'sql prepare', 'boolean');
  const planned = planFor(ctx, text);
  const plan = await planned.plan;
  const naming = namingFor(options.prepare, ctx.sqlPieces.prepare, planned.calls);
  resolveCut(plan.limits, values); // a bad LIMIT or OFFSET value is refused before anything is sent
  if (plan.kind === 'once') {
    return traced(ctx.onEvent, 'sql', async (trace) => {
      const server = onceServer(await ctx.map.fresh());
      const [answer] = await runPieces(ctx, [{ server, text: plan.statement }], values, trace, naming, 1);
      const { columns, rows } = answer as ServerRows;
      const project = projector(columns);
      return { rows: rows.map(project), columns: toColumns(columns) };
    });
  }
  return traced(ctx.onEvent, 'sql', async (trace) => {
    const answers = await runBuffered(ctx, plan, values, trace, naming);
    if (plan.kind === 'groups') {
      const { rows, columns } = await groupsAnswer(ctx, plan, answers, values);
      const project = projector(columns);
      return { rows: rows.map(project), columns: toColumns(columns) };
    }
    const { rows, columns } = await rowsPipeline(
      ctx,
      plan,
      answers.map((a) => a.server),
      answers[0]?.columns ?? [],
      answers.map((a) => arraySource(a.rows)),
      values,
    );
    const project = projector(columns);
    const out: Row[] = [];
    for await (const row of rows) out.push(project(row));
    return { rows: out, columns: toColumns(columns) };
  });
}

/**
 * The answer as an async iterator of rows. Plans of the rows shape (no aggregate) stream: each server's rows are
 * read `batchSize` at a time through a cursor and merged in order (or passed on unordered), so memory stays at a
 * batch per server; leaving the loop early closes the cursors. Aggregate plans are computed whole, then iterated.
 */
export async function* streamSql(
  ctx: RouterContext,
  text: string,
  values: readonly unknown[] = [],
  options: SqlStreamOptions = {},
): AsyncGenerator<Row> {
  expectArray(values, 'sqlStream values');
  const plan = await planFor(ctx, text).plan;
  resolveCut(plan.limits, values);
  optionsObject(options, 'sqlStream options');
  // pg-cursor sends any count it is given as the 32-bit row count of Execute: NaN, -1 or 2 ** 32 breaks the
  // connection after the pool has taken it back, and its error event then ends the process.
  const batch = expectWholeNumber(options.batchSize, 'sqlStream batchSize', 1, 2 ** 31 - 1) ?? 1000;
  if (plan.kind === 'once') {
    const stream = await openServerStream(
      ctx,
      onceServer(await ctx.map.fresh()),
      plan.statement,
      values,
      batch,
    );
    try {
      const project = projector(await stream.columns());
      for (let row = await stream.next(); row; row = await stream.next()) yield project(row);
    } finally {
      await stream.close();
    }
    return;
  }
  if (plan.kind === 'groups') {
    yield* (await runSql(ctx, text, values)).rows;
    return;
  }
  const { servers, streams, columns } = await openStreams(ctx, plan, values, batch);
  try {
    const { rows, columns: visible } = await rowsPipeline(ctx, plan, servers, columns, streams, values);
    const project = projector(visible);
    for await (const row of rows) yield project(row);
  } finally {
    await Promise.all(streams.map((s) => s.close()));
  }
}

/**
 * Every piece's cursor (at most `sqlConnectionsPerServer` pieces per server), opened on the map of the moment,
 * with its first batch read. When a server says a table or schema is not there and the re-read map shows a shard
 * moved (`movedAway`), every cursor is closed and the whole set opened again on the new map, as router.sql runs
 * again.
 *
 * What may be retried, exactly: only this opening, before the first row leaves the stream. It waits for every
 * piece's first batch (read in parallel) before the stream yields anything, so a piece that fails does so while
 * no row has been given out, and a retry cannot give a row twice. After that there is nothing of a move to retry:
 * a piece's first read has planned its whole statement, which locks every shard table it reads until its cursor
 * closes, so a move's cleanup cannot drop them under a running stream (its DROP waits). A stream that read a map
 * older than a finished move but whose old copy is still there reads that copy, which holds the rows as of the
 * cutover (routing/map.ts): a read that began before the switch, not a wrong one. Any error after the first row is
 * the caller's.
 */
async function openStreams(
  ctx: RouterContext,
  plan: RowsPlan,
  values: readonly unknown[],
  batch: number,
): Promise<{ servers: string[]; streams: ServerStream[]; columns: Column[] }> {
  for (let attempt = 1; ; attempt++) {
    const map = await ctx.map.fresh();
    // A stream holds a connection per piece while it reads: at most connectionsPerServer pieces per server.
    const pieces = pieceStatements(plan, map, {
      shardsPerStatement: ctx.sqlPieces.shardsPerStatement,
      maxPieces: ctx.sqlPieces.connectionsPerServer,
    });
    const streams: ServerStream[] = [];
    let failure: unknown;
    try {
      for (const { server, text: statement } of pieces)
        streams.push(await openServerStream(ctx, server, statement, values, batch));
      const firsts = await Promise.allSettled(streams.map((s) => s.columns()));
      const failed = firsts.find((f): f is PromiseRejectedResult => f.status === 'rejected');
      if (!failed) {
        const columns = (firsts[0] as PromiseFulfilledResult<Column[]>).value;
        return { servers: pieces.map((p) => p.server), streams, columns };
      }
      failure = failed.reason;
    } catch (error) {
      failure = error;
    }
    await Promise.all(streams.map((s) => s.close()));
    if (!(await movedAway(ctx, failure, map, attempt))) throw failure;
  }
}

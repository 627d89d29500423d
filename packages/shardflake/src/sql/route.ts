import { createRequire } from 'node:module';
import type pg from 'pg';
import { wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import type { RouterContext } from '../routing/context.js';
import { acquireOn, isConnectionLost } from '../routing/lease.js';
import { type MapState, placementIn } from '../routing/map.js';
import type { OperationTrace } from '../telemetry/trace.js';
import type { GroupsPlan, RowsPlan } from './plan.js';
import {
  forgetName,
  holds,
  makeRoom,
  namesOff,
  noteUsed,
  type PieceNaming,
  planChangedShape,
  poolerLostStatement,
  statementName,
  turnNamesOff,
} from './prepared.js';
import type { Cell } from './values.js';

/**
 * Primitive "send to servers": each server's shards cut into pieces of at most `shardsPerStatement` shards, one
 * statement per piece — the UNION ALL of the branch filled with each of the piece's shards' schemas, wrapped in the
 * plan's server statement — run over up to `connectionsPerServer` of the server's pooled connections at once.
 *
 * Why pieces: PostgreSQL plans a UNION ALL of n branches in time growing with n² and keeps every branch's plan,
 * relation cache entries and locks until the statement ends (measured: 21 ms to plan 256 branches, 2.3 s and
 * 1.1 GB of backend memory for 2,048). Pieces of 64 make planning linear in shards and bound what one statement
 * costs a backend. A piece's answer is exactly what a server's was — the plan's partial aggregates, or its rows
 * sorted and cut at LIMIT + OFFSET — over fewer shards, so the primitives that combine servers' answers combine
 * pieces unchanged. Rows come back as PostgreSQL's text with each column's type OID (the router parses them
 * once, at the end, see values.ts).
 */
export interface Column {
  name: string;
  oid: number;
}

/** One statement: the server it runs on and its text (and, once named, its statement name). */
export interface Piece {
  server: string;
  text: string;
  name?: string;
}

/** A piece's whole answer. */
export interface ServerRows {
  server: string;
  columns: Column[];
  rows: Cell[][];
}

/** Every value as the text the server sent. */
const RAW_TYPES = { getTypeParser: () => (value: string) => value };

/**
 * The statements of a plan on a map: each server's shards (in shard order) cut into runs of at most
 * `shardsPerStatement`, and into at most `maxPieces` per server when given (a stream holds a connection per
 * piece); the runs of a server differ in size by one at most. The same plan on the same map gives the same
 * statements, so they are kept for the map's few most recent plans (making them again costs the router ≈ 6 ms of
 * CPU per call at 8,192 shards; they hold ≈ 1.7 MB of text per plan there).
 */
export function pieceStatements(
  plan: GroupsPlan | RowsPlan,
  map: MapState,
  split: { shardsPerStatement: number; maxPieces?: number },
  trace?: OperationTrace,
): Piece[] {
  // While an adoption serves every shard from the source's one schema, one shard reads all of it once.
  const count = map.adoption?.servingFromSource ? 1 : map.logicalShards;
  if (trace) for (let shard = 0; shard < count; shard++) trace.shard(shard);
  let byPlan = piecesByMap.get(map);
  if (!byPlan) {
    byPlan = new Map();
    piecesByMap.set(map, byPlan);
  }
  const key = `${split.shardsPerStatement}/${split.maxPieces ?? ''}`;
  let made = byPlan.get(plan);
  const hit = made?.get(key);
  if (hit) {
    byPlan.delete(plan); // most recent last
    byPlan.set(plan, made as Map<string, Piece[]>);
    return hit;
  }
  const pieces = makePieces(plan, map, count, split);
  if (!made) {
    if (byPlan.size >= PLANS_KEPT_PER_MAP) byPlan.delete(byPlan.keys().next().value as GroupsPlan | RowsPlan);
    made = new Map();
    byPlan.set(plan, made);
  }
  made.set(key, pieces);
  return pieces;
}

const PLANS_KEPT_PER_MAP = 4;
const piecesByMap = new WeakMap<MapState, Map<GroupsPlan | RowsPlan, Map<string, Piece[]>>>();

function makePieces(
  plan: GroupsPlan | RowsPlan,
  map: MapState,
  count: number,
  split: { shardsPerStatement: number; maxPieces?: number },
): Piece[] {
  const schemas = new Map<string, string[]>();
  for (let shard = 0; shard < count; shard++) {
    const p = placementIn(map, shard);
    const list = schemas.get(p.server);
    if (list) list.push(p.schema);
    else schemas.set(p.server, [p.schema]);
  }
  const pieces: Piece[] = [];
  for (const [server, list] of schemas) {
    const wanted = Math.ceil(list.length / split.shardsPerStatement);
    const k = Math.max(1, Math.min(wanted, split.maxPieces ?? wanted));
    for (let i = 0; i < k; i++) {
      const run = list.slice(Math.floor((i * list.length) / k), Math.floor(((i + 1) * list.length) / k));
      const union = run
        .map((schema) => `(${plan.branch.fill(quoteIdent(schema, 'schema'))})`)
        .join(' UNION ALL ');
      pieces.push({ server, text: plan.server ? plan.server.fill(`(${union})`) : union });
    }
  }
  return pieces;
}

const columnsOf = (fields: readonly pg.FieldDef[]): Column[] =>
  fields.map((f) => ({ name: f.name, oid: f.dataTypeID }));

/**
 * Every piece's whole answer, in the order of `pieces`: servers in parallel, and on each server up to
 * `connections` pieces at once, each on a connection taken for it and given back when it ends (so a long call
 * leaves room in the pool between its pieces). After a piece fails, no other piece of the call starts.
 */
export async function runPieces(
  ctx: RouterContext,
  pieces: readonly Piece[],
  values: readonly unknown[],
  trace: OperationTrace | undefined,
  naming: PieceNaming,
  connections: number,
): Promise<ServerRows[]> {
  const answers: ServerRows[] = new Array(pieces.length);
  const queues = new Map<string, number[]>();
  pieces.forEach((piece, i) => {
    const queue = queues.get(piece.server);
    if (queue) queue.push(i);
    else queues.set(piece.server, [i]);
  });
  let failed = false;
  const worker = async (queue: number[]) => {
    for (let i = queue.shift(); i !== undefined && !failed; i = queue.shift()) {
      try {
        answers[i] = await runPiece(ctx, pieces[i] as Piece, values, trace, naming);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  await Promise.all(
    [...queues.values()].flatMap((queue) =>
      Array.from({ length: Math.min(connections, queue.length) }, () => worker(queue)),
    ),
  );
  return answers;
}

async function runPiece(
  ctx: RouterContext,
  piece: Piece,
  values: readonly unknown[],
  trace: OperationTrace | undefined,
  naming: PieceNaming,
): Promise<ServerRows> {
  const { server, text } = piece;
  const unnamed = naming === 'unnamed' || (naming === 'named-or-back' && namesOff(ctx, server));
  if (!unnamed) piece.name ??= statementName(text);
  const name = unnamed ? undefined : piece.name;
  const lease = await acquireOn(ctx, server, {
    intent: 'read',
    after: ctx.positions.get(server),
    ...(name ? { prefers: holds(name) } : {}),
  });
  trace?.lease(server, lease);
  const client = lease.client;
  const run = (name?: string) =>
    client.query({
      ...(name ? { name } : {}),
      text,
      values: [...values],
      rowMode: 'array',
      types: RAW_TYPES,
    });
  try {
    const result = name ? await runNamed(ctx, server, client, name, run, naming) : await run();
    lease.release();
    return { server, columns: columnsOf(result.fields), rows: result.rows as Cell[][] };
  } catch (error) {
    const lost = isConnectionLost(error, client);
    ctx.nodes(server).noteError(lease.node, error);
    lease.release(lost ? error : undefined);
    throw wrapPgError(error, lease.node);
  }
}

/**
 * A piece as the named statement `name` (sql/prepared.ts): room made on the connection first; parsed again once
 * when DDL changed the columns it returns; in 'named-or-back', run unnamed when a pooler lost it.
 */
async function runNamed(
  ctx: RouterContext,
  server: string,
  client: pg.PoolClient,
  name: string,
  run: (name?: string) => Promise<pg.QueryResult>,
  naming: PieceNaming,
): Promise<pg.QueryResult> {
  try {
    await makeRoom(client, name);
    const result = await run(name);
    noteUsed(client, name);
    return result;
  } catch (error) {
    if (naming === 'named-or-back' && poolerLostStatement(error)) {
      forgetName(client, name);
      turnNamesOff(ctx, server);
      return run();
    }
    if (!planChangedShape(error)) throw error;
    forgetName(client, name);
    await client.query(`DEALLOCATE ${name}`);
    const result = await run(name);
    noteUsed(client, name);
    return result;
  }
}

interface CursorLike {
  read(rows: number): Promise<Cell[][]>;
  close(): Promise<void>;
  _result?: { fields?: pg.FieldDef[] };
}
type CursorClass = new (text: string, values: unknown[], config: object) => CursorLike;
let Cursor: CursorClass | undefined;

/**
 * One server's answer as a stream: a portal read `batch` rows at a time (pg-cursor), so a big answer is never
 * held whole. The connection is held until the stream ends or is closed.
 */
export interface ServerStream {
  columns(): Promise<Column[]>;
  next(): Promise<Cell[] | undefined>;
  close(): Promise<void>;
}

export async function openServerStream(
  ctx: RouterContext,
  server: string,
  text: string,
  values: readonly unknown[],
  batch: number,
  trace?: OperationTrace,
): Promise<ServerStream> {
  Cursor ??= createRequire(import.meta.url)('pg-cursor') as CursorClass;
  // Built before the connection is taken: nothing between acquire and the cursor's first read may throw, or the
  // connection would never go back to the pool.
  const query = new Cursor(text, [...values], {
    rowMode: 'array',
    types: RAW_TYPES,
  }) as unknown as pg.Submittable;
  const lease = await acquireOn(ctx, server, { intent: 'read', after: ctx.positions.get(server) });
  trace?.lease(server, lease);
  const cursor = lease.client.query(query) as unknown as CursorLike;
  let buffer: Cell[][] = [];
  let at = 0;
  let done = false;
  let released = false;
  const finish = async (error?: unknown) => {
    if (released) return;
    released = true;
    done = true;
    await cursor.close().catch(() => {});
    lease.release(error);
  };
  const read = async () => {
    try {
      buffer = await cursor.read(batch);
      at = 0;
      if (buffer.length === 0) await finish();
    } catch (error) {
      const lost = isConnectionLost(error, lease.client);
      ctx.nodes(server).noteError(lease.node, error);
      released = true;
      done = true;
      // a portal that failed leaves the connection usable only after its transaction ends: discard it
      lease.release(lost ? error : true);
      throw wrapPgError(error, lease.node);
    }
  };
  const first = read();
  first.catch(() => {});
  return {
    async columns() {
      await first;
      return columnsOf(cursor._result?.fields ?? []);
    },
    async next() {
      await first;
      while (at >= buffer.length) {
        if (done) return undefined;
        await read();
      }
      return buffer[at++];
    },
    close: () => finish(),
  };
}

const collations = new WeakMap<RouterContext, Map<string, Promise<boolean>>>();

/**
 * Whether a server's database sorts text by code point (collation C or POSIX, or the builtin C.UTF-8), which
 * the router can reproduce. Asked once per router and server, and only by plans that order text.
 */
export function sortsByCodePoint(ctx: RouterContext, server: string): Promise<boolean> {
  let known = collations.get(ctx);
  if (!known) {
    known = new Map();
    collations.set(ctx, known);
  }
  let answer = known.get(server);
  if (!answer) {
    answer = (async () => {
      const lease = await acquireOn(ctx, server, { intent: 'read' });
      try {
        const result = await lease.client.query(
          `SELECT datcollate, datlocprovider::text AS provider FROM pg_database WHERE datname = current_database()`,
        );
        lease.release();
        const row = result.rows[0] as { datcollate: string; provider: string } | undefined;
        return (
          row !== undefined &&
          ['C', 'POSIX', 'C.UTF-8', 'C.utf8'].includes(row.datcollate) &&
          row.provider !== 'i'
        );
      } catch (error) {
        lease.release(error);
        throw wrapPgError(error, lease.node);
      }
    })();
    answer.catch(() => known?.delete(server));
    known.set(server, answer);
  }
  return answer;
}

import { expectArray, expectObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { ShardflakeId } from '../ids/id.js';
import { wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import type { Operation } from '../telemetry/events.js';
import { type OperationTrace, traced } from '../telemetry/trace.js';
import type { RouterContext } from './context.js';
import { acquireOn, isConnectionLost } from './lease.js';
import { type MapState, placementIn, shardOfIdIn } from './map.js';
import { sqlStateOf } from './retry.js';
import type { Row } from './rows.js';
import { type ShardKey, shardForKey } from './shard-key.js';

/**
 * Reads across shards: one statement per server (a UNION ALL of the server's shards, each shard's part qualified
 * with its schema), servers in parallel, results merged in id order (newest first, keyset pagination) or returned
 * per shard. The feed is the special case "rows of these keys' shards, by a column".
 *
 * Cross-shard reads are not one snapshot: each server answers from its own. A read that races a move may find a
 * schema gone (42P01/3F000); it is run again once the re-read map shows the shard moved.
 */
export type FeedOptions = FeedCommon & FeedKeys;

/**
 * What a feed's keys are, said in their type: shard keys (routed like insert keys, modulo / hash), or ids made by
 * this cluster with `keysAreIds: true` (e.g. user ids: each key's rows live on the shard named in its id bits —
 * rows colocated with their parent, as Instagram keeps photos on their user's shard). Ids given without
 * `keysAreIds: true`, or plain bigints with it, do not compile: each would read other shards and find 0 rows.
 */
export type FeedKeys =
  | {
      /** Ids whose rows to read; each goes to the shard in its id bits. */
      keys: readonly ShardflakeId[];
      /** Says the keys are ids of this cluster, routed by their shard bits; required with ids. */
      keysAreIds: true;
    }
  | {
      /** Shard keys whose rows to read; each goes to its shard. */
      keys?: readonly ShardKey[];
      /** Left out (or false) for shard keys, routed by modulo/hash as `insert` routes them. */
      keysAreIds?: false;
    };

/**
 * The options every form of `router.feed` shares: the column, the shards, the page size and where the page starts.
 */
export interface FeedCommon {
  /** Column the keys are matched against (e.g. `user_id`); leave out to read whole shards. */
  column?: string;
  /** Shards to read when no keys are given (default: all). */
  shards?: readonly number[];
  /** Rows per page (default 20). */
  limit?: number;
  /** Keyset pagination: only ids below this (newest first) — pass the previous page's `next`. */
  before?: ShardflakeId;
}

/** A page of rows read across shards, newest first, and where the next page starts. */
export interface FeedPage<R extends object = Row> {
  /** The page's rows, newest first (largest id first), at most `limit` of them. */
  rows: R[];
  /** The `before` of the next page, or null when this page was the last. */
  next: ShardflakeId | null;
}

/**
 * A read to run in many shards. `sql` builds the statement for one shard from `table(name)`, which returns that
 * shard's table as a quoted, schema-qualified name (the name is validated); values go as `$1…` and are the same
 * for every shard. Never build the text from user input: put input in `values`.
 */
export interface ShardQuery {
  /** Builds one shard's statement; `table(name)` is that shard's table as a quoted, schema-qualified name. */
  sql: (table: (name: string) => string) => string;
  /** Parameters `$1…` of the statement, the same for every shard (default none). */
  values?: readonly unknown[];
  /** Shards to read (default: all). */
  shards?: readonly number[];
}

/** A read across shards whose rows are merged newest first by `id` and cut into pages (`router.query`). */
export interface MergedQuery extends ShardQuery {
  /** Rows per page (default 20); the statement's rows need an `id` column, merged newest first. */
  limit?: number;
  /** Keyset pagination: only ids below this — pass the previous page's `next`. */
  before?: ShardflakeId;
}

/** One shard's part of a server's statement: its text given the parameter numbers the server statement uses. */
interface Part {
  shard: number;
  schema: string;
  keys?: (ShardKey | ShardflakeId)[];
}

const MISSING_RELATION = ['42P01', '3F000'];
/** A read racing moves re-reads the map and runs again at most this many times. */
const SCATTER_ATTEMPTS = 3;

/** Runs one statement per server over `parts` grouped by server; the statement text comes from `build`. */
async function perServer(
  ctx: RouterContext,
  trace: OperationTrace | undefined,
  pick: (map: MapState) => Part[],
  build: (parts: Part[], values: unknown[]) => string,
  baseValues: readonly unknown[],
): Promise<Row[][]> {
  for (let attempt = 1; ; attempt++) {
    const map = await ctx.map.fresh();
    const byServer = new Map<string, Part[]>();
    for (const part of pick(map)) {
      const p = placementIn(map, part.shard);
      trace?.shard(part.shard);
      part.schema = p.schema;
      const list = byServer.get(p.server);
      if (list) list.push(part);
      else byServer.set(p.server, [part]);
    }
    try {
      return await Promise.all(
        [...byServer].map(async ([server, parts]) => {
          const values = [...baseValues];
          const text = build(parts, values);
          const lease = await acquireOn(ctx, server, { intent: 'read', after: ctx.positions.get(server) });
          trace?.lease(server, lease);
          try {
            const result = await lease.client.query(text, values);
            lease.release();
            return result.rows as Row[];
          } catch (error) {
            const lost = isConnectionLost(error, lease.client);
            ctx.nodes(server).noteError(lease.node, error);
            lease.release(lost ? error : undefined);
            throw wrapPgError(error, lease.node);
          }
        }),
      );
    } catch (error) {
      const state = sqlStateOf(error);
      if (attempt >= SCATTER_ATTEMPTS || state === undefined || !MISSING_RELATION.includes(state))
        throw error;
      ctx.map.markStale();
      const newer = await ctx.map.fresh();
      if (newer.version === map.version) throw error;
      trace?.retryReasons.push('unknown-table');
    }
  }
}

/** k-way merge of per-server pages, each newest first, into one page of `limit`. */
function mergeNewestFirst<R extends object>(pages: Row[][], limit: number): FeedPage<R> {
  const heads = pages.map(() => 0);
  const rows: Row[] = [];
  while (rows.length < limit) {
    let best = -1;
    let bestId: bigint | undefined;
    for (let i = 0; i < pages.length; i++) {
      const row = pages[i]?.[heads[i] as number];
      if (row && (bestId === undefined || (row.id as bigint) > bestId)) {
        best = i;
        bestId = row.id as bigint;
      }
    }
    if (best === -1) break;
    rows.push(pages[best]?.[heads[best] as number] as Row);
    heads[best] = (heads[best] as number) + 1;
  }
  const last = rows[rows.length - 1];
  return { rows: rows as R[], next: rows.length === limit && last ? (last.id as ShardflakeId) : null };
}

function checkLimit(limit: number, what: Operation): void {
  if (!Number.isInteger(limit) || limit < 1)
    throw new ShardflakeError('INVALID_ARGUMENT', `${what} limit must be a positive whole number`);
}

/** A query's object and its arrays, checked before they are spread or iterated. */
function checkQuery(query: ShardQuery, what: string): void {
  expectObject(query, what);
  expectArray(query.values, `${what} values`);
  expectArray(query.shards, `${what} shards`);
}

/** One shard's statement from the caller's `sql(table)`, which must give text. */
function statementIn(query: ShardQuery, schema: string): string {
  const text: unknown = query.sql(tableIn(schema));
  if (typeof text !== 'string')
    throw new ShardflakeError('INVALID_ARGUMENT', `query sql must return text, not ${shown(text)}`);
  return text;
}

function allShards(map: MapState, shards: readonly number[] | undefined): number[] {
  // While an adoption serves every shard from the source's one schema, one shard reads all of it once.
  if (!shards && map.adoption?.servingFromSource) return [0];
  return shards ? [...new Set(shards)] : Array.from({ length: map.logicalShards }, (_, i) => i);
}

export async function feed<R extends object = Row>(
  ctx: RouterContext,
  table: string,
  options: FeedOptions,
): Promise<FeedPage<R>> {
  expectObject(options, 'feed options');
  expectArray(options.keys, 'feed keys');
  expectArray(options.shards, 'feed shards');
  const limit = options.limit ?? 20;
  checkLimit(limit, 'feed');
  quoteIdent(table, 'table');
  if (options.keys && !options.column)
    throw new ShardflakeError('INVALID_ARGUMENT', 'feed with keys needs the column they match');
  if (options.column) quoteIdent(options.column, 'column');
  const pick = (map: MapState): Part[] => {
    if (!options.keys) return allShards(map, options.shards).map((shard) => ({ shard, schema: '' }));
    const keysByShard = new Map<number, (ShardKey | ShardflakeId)[]>();
    for (const key of options.keys as readonly (ShardKey | ShardflakeId)[]) {
      const shard = options.keysAreIds
        ? shardOfIdIn(map, key as ShardflakeId)
        : shardForKey(key as ShardKey, map.logicalShards);
      const list = keysByShard.get(shard);
      if (list) list.push(key);
      else keysByShard.set(shard, [key]);
    }
    return [...keysByShard].map(([shard, keys]) => ({ shard, schema: '', keys }));
  };
  const base: unknown[] = [limit];
  if (options.before !== undefined) base.push(options.before);
  const beforeClause = options.before !== undefined ? ' AND id < $2' : '';
  // One query per server: each shard's newest rows (index scan on the id primary key), then the server's top.
  const build = (parts: Part[], values: unknown[]) => {
    const selects = parts.map(({ schema, keys }) => {
      let where = 'true';
      if (options.column) {
        values.push(keys ?? []);
        where = `${quoteIdent(options.column, 'column')} = ANY($${values.length})`;
      }
      return `(SELECT * FROM ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} WHERE ${where}${beforeClause} ORDER BY id DESC LIMIT $1)`;
    });
    return `SELECT * FROM (${selects.join(' UNION ALL ')}) AS page ORDER BY id DESC LIMIT $1`;
  };
  return traced(ctx.onEvent, 'feed', async (trace) =>
    mergeNewestFirst<R>(await perServer(ctx, trace, pick, build, base), limit),
  );
}

function tableIn(schema: string): (name: string) => string {
  return (name) => `${quoteIdent(schema, 'schema')}.${quoteIdent(name, 'table')}`;
}

/** A read run in many shards, merged newest first by `id`, with keyset pagination. */
export async function queryMerged<R extends object = Row>(
  ctx: RouterContext,
  query: MergedQuery,
): Promise<FeedPage<R>> {
  checkQuery(query, 'query');
  const limit = query.limit ?? 20;
  checkLimit(limit, 'query');
  if (typeof query.sql !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'query needs sql: (table) => statement text');
  const base = [...(query.values ?? [])];
  base.push(limit);
  const limitParam = `$${base.length}`;
  let beforeClause = '';
  if (query.before !== undefined) {
    base.push(query.before);
    beforeClause = ` WHERE id < $${base.length}`;
  }
  const pick = (map: MapState): Part[] =>
    allShards(map, query.shards).map((shard) => ({ shard, schema: '' }));
  const build = (parts: Part[]) => {
    const selects = parts.map(
      ({ schema }) =>
        `(SELECT * FROM (${statementIn(query, schema)}) AS q${beforeClause} ORDER BY id DESC LIMIT ${limitParam})`,
    );
    return `SELECT * FROM (${selects.join(' UNION ALL ')}) AS page ORDER BY id DESC LIMIT ${limitParam}`;
  };
  return traced(ctx.onEvent, 'query', async (trace) =>
    mergeNewestFirst<R>(await perServer(ctx, trace, pick, build, base), limit),
  );
}

const SHARD_COLUMN = 'shardflake_shard';

/** A read run in many shards, its rows returned per shard. */
export async function queryByShard<R extends object = Row>(
  ctx: RouterContext,
  query: ShardQuery,
): Promise<Map<number, R[]>> {
  checkQuery(query, 'queryByShard');
  if (typeof query.sql !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'query needs sql: (table) => statement text');
  const pick = (map: MapState): Part[] =>
    allShards(map, query.shards).map((shard) => ({ shard, schema: '' }));
  // The shard number is ours (an integer from the map), so it can be written into the text.
  const build = (parts: Part[]) =>
    parts
      .map(
        ({ shard, schema }) =>
          `(SELECT ${Number(shard)}::int AS ${SHARD_COLUMN}, q.* FROM (${statementIn(query, schema)}) AS q)`,
      )
      .join(' UNION ALL ');
  return traced(ctx.onEvent, 'query', async (trace) => {
    const pages = await perServer(ctx, trace, pick, build, query.values ?? []);
    const byShard = new Map<number, R[]>();
    for (const shard of query.shards ?? []) byShard.set(shard, []);
    for (const rows of pages) {
      for (const { [SHARD_COLUMN]: shard, ...row } of rows) {
        const list = byShard.get(shard as number);
        if (list) list.push(row as R);
        else byShard.set(shard as number, [row as R]);
      }
    }
    return byShard;
  });
}

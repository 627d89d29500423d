import type { ShardPlacement } from '../catalog/shards.js';
import { expectObject } from '../errors/arguments.js';
import { isShardflakeError, ShardflakeError } from '../errors/errors.js';
import type { ShardflakeId } from '../ids/id.js';
import { wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import type { RetryReason } from '../telemetry/events.js';
import { type OperationTrace, traced } from '../telemetry/trace.js';
import type { RouterContext } from './context.js';
import { acquireOn, isConnectionLost } from './lease.js';
import { type MapState, placementIn, shardOfIdIn } from './map.js';
import { type AttemptInfo, pause, retryReason, sqlStateOf } from './retry.js';
import type { Row } from './rows.js';
import { type ShardKey, shardForKey } from './shard-key.js';
import { insertRowsSql } from './statements.js';

/**
 * Bulk writes routed by key: rows split by shard, one transaction per server holding one multi-row
 * `INSERT … RETURNING id` per shard (chunked to PostgreSQL's 65,535 bind parameters), servers in parallel, ids
 * back in input order.
 *
 * Atomicity: all rows of one server commit together or not at all; servers commit independently. When a server
 * fails, the rows of servers that committed stay, and the error says which rows did not land. A shard found
 * fenced or moved (its server's transaction rolled back) is retried on its new home like any write.
 *
 * Why INSERT … RETURNING and not COPY: COPY cannot return the ids the database generates, so it would need the ids
 * drawn first (one `SELECT next_id() FROM generate_series(…)` per shard, an extra round trip, and an id column
 * written explicitly), and see docs/applications.md ("Bulk writes") for the measurement that decided it.
 */
export type InsertManyOptions<R extends Row = Row> =
  | {
      /** Routes each row by the shard key this function returns for it. */
      key: (row: R, index: number) => ShardKey;
      /** Not with `key`: the ways of routing exclude each other. */
      shard?: undefined;
      /** Not with `key`: the ways of routing exclude each other. */
      id?: undefined;
    }
  | {
      /** Puts every row in this one logical shard (0 to logicalShards − 1). */
      shard: number;
      /** Not with `shard`: the ways of routing exclude each other. */
      key?: undefined;
      /** Not with `shard`: the ways of routing exclude each other. */
      id?: undefined;
    }
  | {
      /**
       * Puts each row beside the row of this id (its owner: `(like) => like.user_id`), in the shard the id's bits
       * name, as `withShard({ id })` does (an old id of an adopted cluster routes as the root id it is, adopt/).
       * The row gets its own id from that shard's next_id().
       */
      id: (row: R, index: number) => ShardflakeId;
      /** Not with `id`: the ways of routing exclude each other. */
      key?: undefined;
      /** Not with `id`: the ways of routing exclude each other. */
      shard?: undefined;
    };

/** Exactly one way of routing: `key`, `id` (functions) or `shard`. */
export function checkRouting(options: InsertManyOptions<never>): void {
  const ways = [
    typeof options?.key === 'function',
    options?.shard !== undefined,
    typeof options?.id === 'function',
  ].filter(Boolean).length;
  if (ways !== 1)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      'insertMany needs one of { key: (row) => shard key }, { id: (row) => owner id } or { shard }',
    );
}

/**
 * The rows' columns (row 0's, which every row must have) and their logical shards, by `key`, `id` or one `shard`;
 * every row checked before anything is sent. Both insertMany paths (this file, lookups/rows.ts) route with it.
 */
export function routeRows<R extends Row>(
  rows: readonly R[],
  options: InsertManyOptions<R>,
  map: MapState,
): { columns: string[]; byShard: Map<number, number[]> } {
  checkRouting(options as InsertManyOptions<never>);
  const columns = Object.keys(expectObject(rows[0], 'row 0'));
  if (columns.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'row 0 has no columns; insertMany needs at least one');
  for (const c of columns) quoteIdent(c, 'column');
  const byShard = new Map<number, number[]>();
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i] as R;
    if (typeof row !== 'object' || row === null)
      throw new ShardflakeError('INVALID_ARGUMENT', `row ${i} is not an object`);
    const keys = Object.keys(row);
    if (keys.length !== columns.length || !columns.every((c) => c in row))
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `row ${i} has the columns (${keys.join(', ')}), not those of row 0 (${columns.join(', ')}); give every row the same columns`,
      );
    let shard: number;
    try {
      if (options.key) shard = shardForKey(options.key(row, i), map.logicalShards);
      else if (options.id) shard = shardOfIdIn(map, options.id(row, i));
      else shard = options.shard as number;
      placementIn(map, shard);
    } catch (error) {
      if (!isShardflakeError(error)) throw error;
      throw new ShardflakeError(error.code, `row ${i}: ${error.message}`, { cause: error });
    }
    const list = byShard.get(shard);
    if (list) list.push(i);
    else byShard.set(shard, [i]);
  }
  return { columns, byShard };
}

/** Whether a sharded table has an `id` column to return (asked once per router and table, on a shard connection). */
export async function returnsIds(
  ctx: RouterContext,
  client: { query(text: string, values: unknown[]): Promise<{ rows: unknown[] }> },
  schema: string,
  table: string,
): Promise<boolean> {
  const known = ctx.statements.hasIdColumn(table);
  if (known !== undefined) return known;
  const { rows } = await client.query(
    `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                      AND attname = 'id' AND attnum > 0 AND NOT attisdropped) AS has`,
    [schema, table],
  );
  const has = (rows[0] as { has: boolean }).has;
  ctx.statements.noteIdColumn(table, has);
  return has;
}

/** Rows per INSERT statement at most (also bounded by 65,535 bind parameters). */
const MAX_ROWS_PER_STATEMENT = 1000;
const MAX_PARAMETERS = 65_535;

interface ShardBatch {
  shard: number;
  /** Input positions of the shard's rows, in input order. */
  rows: number[];
}

/** Which rows failed to land, for the error message. */
function rowList(rows: readonly number[]): string {
  const shown = rows.slice(0, 5).join(', ');
  return rows.length > 5
    ? `rows ${shown} and ${rows.length - 5} more`
    : `row${rows.length > 1 ? 's' : ''} ${shown}`;
}

export async function insertMany<R extends Row>(
  ctx: RouterContext,
  table: string,
  rows: readonly R[],
  options: InsertManyOptions<R>,
): Promise<ShardflakeId[]> {
  quoteIdent(table, 'table');
  if (!Array.isArray(rows))
    throw new ShardflakeError('INVALID_ARGUMENT', 'insertMany needs an array of rows');
  checkRouting(options as InsertManyOptions<never>);
  if (rows.length === 0) return [];
  const map = await ctx.map.fresh();
  const { columns, byShard } = routeRows(rows, options, map);
  const ids: ShardflakeId[] = new Array(rows.length);
  const batches = [...byShard].map(([shard, list]) => ({ shard, rows: list }));
  await traced(ctx.onEvent, 'insertMany', (trace) =>
    writeBatches(ctx, trace, table, columns, rows, batches, ids),
  );
  // A table keyed otherwise (no `id` column) has no ids to give back: every row was written, and the answer is [].
  return ctx.statements.hasIdColumn(table) === false ? [] : ids;
}

async function writeBatches(
  ctx: RouterContext,
  trace: OperationTrace | undefined,
  table: string,
  columns: readonly string[],
  rows: readonly Row[],
  batches: ShardBatch[],
  ids: ShardflakeId[],
): Promise<void> {
  const deadline = performance.now() + ctx.policy.writeRetryMs;
  let backoff = ctx.policy.retryBackoffMs;
  let pending = batches;
  for (let attempt = 1; ; attempt++) {
    const map = await ctx.map.fresh();
    const byServer = new Map<string, { placement: ShardPlacement; batch: ShardBatch }[]>();
    for (const batch of pending) {
      const placement = placementIn(map, batch.shard);
      trace?.shard(batch.shard);
      const list = byServer.get(placement.server);
      if (list) list.push({ placement, batch });
      else byServer.set(placement.server, [{ placement, batch }]);
    }
    const outcomes = await Promise.all(
      [...byServer].map(([server, parts]) =>
        writeServer(ctx, trace, server, table, columns, rows, parts, ids),
      ),
    );
    const retry: ShardBatch[] = [];
    let reason: RetryReason | undefined;
    const failures = outcomes.filter((o) => !o.ok);
    const fatal = failures.find((o) => !o.reason || performance.now() >= deadline);
    if (fatal) {
      // Servers commit independently: say every row that did not land, not only the fatal server's.
      const notWritten = failures.flatMap((o) => o.batches.flatMap((b) => b.rows)).sort((a, b) => a - b);
      const error = fatal.error;
      if (isShardflakeError(error) && error.code !== 'COMMIT_UNKNOWN')
        throw new ShardflakeError(error.code, error.message, {
          sqlState: error.sqlState,
          detail: `not written: ${rowList(notWritten)}; every other row was committed`,
          cause: error.cause ?? error,
        });
      throw error;
    }
    for (const outcome of failures) {
      reason = outcome.reason;
      retry.push(...outcome.batches);
    }
    if (retry.length === 0) return;
    await pause(ctx, reason as RetryReason, map.version, backoff, deadline);
    backoff = Math.min(backoff * 2, ctx.policy.maxRetryBackoffMs);
    trace?.retryReasons.push(reason as RetryReason);
    for (const batch of retry)
      ctx.onEvent?.({
        type: 'retry',
        operation: 'insertMany',
        shard: batch.shard,
        attempt,
        reason: reason as RetryReason,
        woke: 'map',
      });
    pending = retry;
  }
}

interface ServerOutcome {
  ok: boolean;
  error?: unknown;
  /** Set when the server's rows may be written again (nothing of them was committed). */
  reason?: RetryReason | undefined;
  batches: ShardBatch[];
}

/** One transaction on one server: a multi-row INSERT per shard (chunked), then COMMIT. */
async function writeServer(
  ctx: RouterContext,
  trace: OperationTrace | undefined,
  server: string,
  table: string,
  columns: readonly string[],
  rows: readonly Row[],
  parts: { placement: ShardPlacement; batch: ShardBatch }[],
  ids: ShardflakeId[],
): Promise<ServerOutcome> {
  const batches = parts.map((p) => p.batch);
  const landed: [number, ShardflakeId][] = [];
  let lease: Awaited<ReturnType<typeof acquireOn>>;
  try {
    lease = await acquireOn(ctx, server, { intent: 'write', shard: parts[0]?.placement.shard });
  } catch (error) {
    return { ok: false, error: failed(server, batches, error), reason: undefined, batches };
  }
  lease.touch(parts.map((p) => p.placement.shard));
  trace?.lease(server, lease);
  const { client } = lease;
  let current = parts[0] as (typeof parts)[number];
  let chunkRows: number[] = [];
  let committing = false;
  try {
    await client.query('BEGIN');
    const withIds = await returnsIds(ctx, client, current.placement.schema, table);
    const perStatement = Math.max(
      1,
      Math.min(MAX_ROWS_PER_STATEMENT, Math.floor(MAX_PARAMETERS / columns.length)),
    );
    for (const part of parts) {
      current = part;
      for (let from = 0; from < part.batch.rows.length; from += perStatement) {
        chunkRows = part.batch.rows.slice(from, from + perStatement);
        const values: unknown[] = [];
        for (const i of chunkRows) for (const c of columns) values.push((rows[i] as Row)[c]);
        const text = insertRowsSql(part.placement.schema, table, columns, chunkRows.length, withIds);
        const result = await client.query(text, values);
        result.rows.forEach((r: { id: ShardflakeId }, j) => {
          landed.push([chunkRows[j] as number, r.id]);
        });
      }
    }
    committing = true;
    await client.query('COMMIT');
  } catch (error) {
    let lost = isConnectionLost(error, client);
    if (!committing && !lost) {
      // A connection that cannot even roll back must not go back to the pool.
      lost = await client.query('ROLLBACK').then(
        () => false,
        () => true,
      );
    }
    const gone = ctx.nodes(server).noteError(lease.node, error);
    lease.release(lost ? error : undefined);
    if (committing && lost)
      return {
        ok: false,
        error: new ShardflakeError(
          'COMMIT_UNKNOWN',
          `insertMany into ${table}: the connection to server ${server} was lost during COMMIT; ${rowList(batches.flatMap((b) => b.rows))} may or may not have landed`,
          { cause: error },
        ),
        reason: undefined,
        batches,
      };
    const info: AttemptInfo = { nodeGone: gone && !committing };
    const reason = await retryReason(ctx, error, current.placement, true, info);
    if (reason) return { ok: false, error: wrapPgError(error, lease.node), reason, batches };
    const what = committing
      ? rowList(batches.flatMap((b) => b.rows))
      : `shard ${current.batch.shard}, ${rowList(chunkRows)}`;
    const wrapped = wrapPgError(error, lease.node);
    return {
      ok: false,
      error: new ShardflakeError(
        wrapped.code,
        `insertMany into ${table} (${what}): ${wrapped.message}; no row of server ${server} was written`,
        { sqlState: sqlStateOf(error), detail: wrapped.detail, cause: error },
      ),
      reason: undefined,
      batches,
    };
  }
  if (ctx.nodes(server).hasReplicas) {
    const position = await ctx
      .nodes(server)
      .positionAfterWrite(lease)
      .catch(() => undefined);
    if (position !== undefined) ctx.positions.note(server, position);
  }
  lease.release();
  for (const [i, id] of landed) ids[i] = id;
  return { ok: true, batches };
}

function failed(server: string, batches: ShardBatch[], error: unknown): ShardflakeError {
  const wrapped = wrapPgError(error);
  return new ShardflakeError(
    wrapped.code,
    `${wrapped.message}; ${rowList(batches.flatMap((b) => b.rows))} (server ${server}) were not written`,
    { cause: error },
  );
}

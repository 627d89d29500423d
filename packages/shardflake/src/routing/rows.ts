import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import { expectObject, expectString } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { ShardflakeId } from '../ids/id.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import type { Operation } from '../telemetry/events.js';
import { type OperationTrace, traced } from '../telemetry/trace.js';
import type { RouterContext } from './context.js';
import { acquireOn, isConnectionLost } from './lease.js';
import { type MapState, shardOfIdIn } from './map.js';
import { needsOldIdEntry, shardOfOldRootId } from './old-ids.js';
import { type AttemptInfo, routed } from './retry.js';
import { type ShardKey, shardForKey } from './shard-key.js';

/**
 * The single-row calls: insert by shard key, get/update/delete by id (the shard comes out of the id). Each is one
 * schema-qualified statement in autocommit on the shard's server, with no transaction of its own: one round trip.
 */
export type Row = Record<string, unknown>;

/**
 * Where `router.insert` puts a row: the shard of a shard key, beside the row of an id, a shard by number, or beside
 * a lookup's entry.
 */
export interface InsertOptions {
  /** Shard key (a user id, a string…); or give `shard` directly. */
  key?: ShardKey;
  /** The logical shard to insert into (0 to logicalShards − 1), used instead of `key` when given. */
  shard?: number;
  /**
   * Beside the row of this id (its shard bits; in an adopted cluster an old id is taken as the root id it is):
   * used instead of `key` when given.
   */
  id?: ShardflakeId;
  /**
   * A unique lookup of this table: the row goes to the shard of its value's hash, where the value's entry lives,
   * and the row and its entry commit in one local transaction in one round trip (docs/lookups.md, "Sign-up beside
   * its entry"). Instead of `key` or `shard`.
   */
  lookup?: string;
}

/**
 * One statement on the shard's node. A write whose connection is lost after the statement was sent may have been
 * applied (autocommit commits with the statement): COMMIT_UNKNOWN, never re-run. A read, or a write refused by
 * a node that is no longer the primary (25006), is retried on the new primary.
 */
async function statement(
  ctx: RouterContext,
  trace: OperationTrace | undefined,
  placement: ShardPlacement,
  info: AttemptInfo,
  write: boolean,
  text: string,
  values: unknown[],
): Promise<pg.QueryResult> {
  const nodes = ctx.nodes(placement.server);
  const lease = await acquireOn(
    ctx,
    placement.server,
    write
      ? { intent: 'write', shard: placement.shard }
      : { intent: 'read', after: ctx.positions.get(placement.server), shard: placement.shard },
  );
  trace?.lease(placement.server, lease);
  let result: pg.QueryResult;
  try {
    result = await lease.client.query(text, values);
  } catch (error) {
    const lost = isConnectionLost(error, lease.client);
    const gone = nodes.noteError(lease.node, error);
    lease.release(lost ? error : undefined);
    if (write && lost)
      throw new ShardflakeError(
        'COMMIT_UNKNOWN',
        `the connection to shard ${placement.shard}'s server was lost while a write ran: it may or may not have been applied, and was not re-run`,
        { cause: error },
      );
    if (gone) info.nodeGone = true;
    throw wrapPgError(error, lease.node);
  }
  if (write && nodes.hasReplicas) {
    const position = await nodes.positionAfterWrite(lease).catch(() => undefined);
    if (position !== undefined) ctx.positions.note(placement.server, position);
  }
  lease.release();
  return result;
}

/** Routes one statement: the shard from `shardOf`, the text from `text(schema)`, retried as retry.ts allows. */
export function routedStatement(
  ctx: RouterContext,
  operation: Operation,
  shardOf: (map: MapState) => number,
  write: boolean,
  text: (schema: string) => string,
  values: unknown[],
): Promise<pg.QueryResult> {
  return traced(ctx.onEvent, operation, (trace) =>
    routed(ctx, operation, trace, shardOf, write, (placement, info) =>
      statement(ctx, trace, placement, info, write, text(placement.schema), values),
    ),
  );
}

/**
 * A single-row write: one statement in autocommit, or, on a table with a lookup, the same statement in a
 * transaction that keeps the lookup (`ctx.keptWrite`, lookups/rows.ts).
 */
function writeRow(
  ctx: RouterContext,
  operation: 'insert' | 'update' | 'delete',
  table: string,
  shardOf: (map: MapState) => number,
  text: (schema: string) => string,
  values: unknown[],
  /** An insert's row, by column (a table with lookups may predict its entries from it). */
  row?: Row,
): Promise<pg.QueryResult> {
  const kept = ctx.keptWrite?.(table);
  return kept
    ? kept(operation, shardOf, text, values, row)
    : routedStatement(ctx, operation, shardOf, true, text, values);
}

/**
 * The shard of row `id` of `table`, for `routed`: its shard bits, or for an old id of a non-root adopted table its
 * old-id entry (one read of shard id mod logicalShards; old-ids.ts); null when an old id has no entry (no row).
 */
async function rowShard(
  ctx: RouterContext,
  table: string,
  id: ShardflakeId,
): Promise<((map: MapState) => number) | null> {
  const map = await ctx.map.fresh();
  if (!needsOldIdEntry(map.adoption, table, id)) return (m) => shardOfIdIn(m, id);
  const { rows } = await routedStatement(
    ctx,
    'get',
    () => shardOfOldRootId(map.logicalShards, id),
    false,
    (schema) => `SELECT shard FROM ${qualified(schema, OLD_IDS_TABLE)} WHERE tbl = $1 AND id = $2`,
    [table, id],
  );
  const shard = (rows[0] as { shard: number } | undefined)?.shard;
  return shard === undefined ? null : () => shard;
}

export async function insertRow(
  ctx: RouterContext,
  table: string,
  row: Row,
  options: InsertOptions,
): Promise<ShardflakeId> {
  expectString(table, 'insert table', 'INVALID_IDENTIFIER');
  expectObject(row, 'insert row');
  if (options?.shard === undefined && options?.key === undefined && options?.id === undefined)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      'insert needs a shard key ({ key }), an id to place it beside ({ id }), a shard ({ shard }) or a unique lookup ({ lookup })',
    );
  const columns = Object.keys(row);
  const values = columns.map((c) => row[c]);
  const shardOf = (map: MapState) =>
    options.shard ??
    (options.id !== undefined
      ? shardOfIdIn(map, options.id)
      : shardForKey(options.key as ShardKey, map.logicalShards));
  const result = await writeRow(
    ctx,
    'insert',
    table,
    shardOf,
    (schema) => ctx.statements.insert(schema, table, columns),
    values,
    row,
  );
  return BigInt((result.rows[0] as { id: bigint }).id) as ShardflakeId;
}

export async function getRow<R extends object = Row>(
  ctx: RouterContext,
  table: string,
  id: ShardflakeId,
): Promise<R | null> {
  expectString(table, 'get table', 'INVALID_IDENTIFIER');
  const shardOf = await rowShard(ctx, table, id);
  if (!shardOf) return null;
  const result = await routedStatement(
    ctx,
    'get',
    shardOf,
    false,
    (schema) => ctx.statements.get(schema, table),
    [id],
  );
  return (result.rows[0] as R | undefined) ?? null;
}

export async function updateRow(
  ctx: RouterContext,
  table: string,
  id: ShardflakeId,
  changes: Row,
): Promise<boolean> {
  expectString(table, 'update table', 'INVALID_IDENTIFIER');
  const columns = Object.keys(expectObject(changes, 'update changes'));
  if (columns.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'update needs at least one column to change');
  const shardOf = await rowShard(ctx, table, id);
  if (!shardOf) return false;
  const result = await writeRow(
    ctx,
    'update',
    table,
    shardOf,
    (schema) => ctx.statements.update(schema, table, columns),
    [id, ...columns.map((c) => changes[c])],
  );
  return (result.rowCount ?? 0) > 0;
}

export async function deleteRow(ctx: RouterContext, table: string, id: ShardflakeId): Promise<boolean> {
  expectString(table, 'delete table', 'INVALID_IDENTIFIER');
  const shardOf = await rowShard(ctx, table, id);
  if (!shardOf) return false;
  const result = await writeRow(
    ctx,
    'delete',
    table,
    shardOf,
    (schema) => ctx.statements.delete(schema, table),
    [id],
  );
  return (result.rowCount ?? 0) > 0;
}

import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import type { LookupDefinition } from '../config/lookups.js';
import { expectObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { ShardflakeId } from '../ids/id.js';
import { wrapPgError } from '../postgres/connect.js';
import { checkRouting, type InsertManyOptions, returnsIds, routeRows } from '../routing/bulk.js';
import type { RouterContext } from '../routing/context.js';
import { type MapState, placementIn } from '../routing/map.js';
import { type InsertOptions, insertRow, type Row } from '../routing/rows.js';
import type { ShardSession, ShardTarget } from '../routing/session.js';
import { shardForKey } from '../routing/shard-key.js';
import { insertRowsSql } from '../routing/statements.js';
import type { Operation } from '../telemetry/events.js';
import {
  inCrossTransaction,
  SINGLE_WRITE_RETRY,
  type WithShardsOptions,
  withShards,
} from '../transactions/with-shards.js';
import { keepLookups } from './cross.js';
import { lookupText } from './ddl.js';
import { insertBeside, predictChanges } from './insert-beside.js';
import { valueText } from './read.js';

/**
 * A write session of a router that has lookups: a cross transaction of one shard to start with, so the commit can
 * join the entry shards on other servers (lookups/cross.ts). On one server it costs what withShard costs.
 */
export function withShardKept<T>(
  ctx: RouterContext,
  target: ShardTarget,
  fn: (session: ShardSession) => Promise<T> | T,
): Promise<T> {
  // A rejection, as withShard's own check gives (this function is not async).
  if (typeof fn !== 'function')
    return Promise.reject(
      new ShardflakeError('INVALID_ARGUMENT', 'withShard needs a callback that receives the session'),
    );
  return withShardsKept(ctx, [target], (sessions) => fn(sessions[0] as ShardSession));
}

/** `router.withShards`: the transaction keeps the lookups of every shard it writes (cross.ts). */
export function withShardsKept<T>(
  ctx: RouterContext,
  targets: readonly ShardTarget[],
  fn: (sessions: ShardSession[]) => Promise<T> | T,
  options?: WithShardsOptions,
): Promise<T> {
  return withShards(ctx, targets, fn, (tx) => keepLookups(ctx, tx), options);
}

/**
 * The router's single-row calls on a table with a lookup (routing/rows.ts asks for this through
 * `ctx.keptWrite`). A plain call is one statement in autocommit, which would commit the row without its entry
 * (and so fails with SF010, ddl.ts): here the statement runs in a transaction that keeps the lookup.
 *
 * An insert whose entries all hash to shards on the row's server (`lookups`: the table's; `row`: its values) is
 * one round trip: the row, its entries and the COMMIT in one batch (insert-beside.ts). Otherwise, round trips on
 * the common path: the statement goes out with the transaction's BEGIN and the read of the change table (one),
 * and the entry writes with the commit (one more; on another server: its PREPARE, then the decision's COMMIT and
 * COMMIT PREPARED, cross.ts).
 */
export async function writeKept(
  ctx: RouterContext,
  lookups: readonly LookupDefinition[],
  operation: Operation,
  shardOf: (map: MapState) => number,
  text: (schema: string) => string,
  values: unknown[],
  row?: Row,
  /** Whether these lookups take a direct insert (readiness.ts lookupDirectInsert); absent: never. */
  direct?: (lookups: readonly LookupDefinition[]) => Promise<boolean>,
): Promise<pg.QueryResult> {
  if (operation === 'insert' && row) {
    const map = await ctx.map.fresh();
    if (predictChanges(map, placementIn(map, shardOf(map)), lookups, row)) {
      const oneStatement = direct ? await direct(lookups) : false;
      const result = await insertBeside(ctx, lookups, shardOf, text, values, row, oneStatement);
      if (result) return result;
    }
  }
  return inCrossTransaction(
    ctx,
    operation,
    (map) => [placementIn(map, shardOf(map))],
    (tx) => keepLookups(ctx, tx),
    (tx, [placement]) => {
      const p = placement as ShardPlacement;
      return tx.writeKept(p, text(p.schema), values);
    },
    SINGLE_WRITE_RETRY,
  );
}

/**
 * `router.insert(table, row, { lookup })`: the row goes to the shard of its value's hash h(value), the shard that
 * holds the value's entry, so the row and its entry commit in one local transaction, one round trip
 * (insert-beside.ts). The lookup must be a unique lookup of this table (placing rows by a value many rows share
 * would pile them into one shard), and the row must give its column a string, number or bigint.
 */
export async function insertPlaced(
  ctx: RouterContext,
  lookups: readonly LookupDefinition[],
  table: string,
  row: Row,
  options: InsertOptions,
): Promise<ShardflakeId> {
  const name = options.lookup;
  const lookup = lookups.find((l) => l.name === name);
  if (options.key !== undefined || options.shard !== undefined || options.id !== undefined)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      'insert takes one of { key }, { id }, { shard } or { lookup }, not two',
    );
  if (!lookup)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `insert's lookup ${shown(name)} is not one of the router's lookups (${lookups.map((l) => l.name).join(', ') || 'none'})`,
    );
  if (lookup.table !== table)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `insert into ${shown(table)} cannot be placed by lookup ${lookup.name}, which is on table ${lookup.table}`,
    );
  if (!lookup.unique)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `insert can be placed only by a unique lookup, and ${lookup.name} is not unique (every row holding one value would land in one shard)`,
    );
  const value = expectObject(row, 'insert row')[lookup.column];
  if (value === null || value === undefined)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `insert placed by lookup ${lookup.name} needs the row's ${lookup.column}, which decides its shard`,
    );
  const { logicalShards } = await ctx.map.fresh();
  return insertRow(ctx, table, row, {
    shard: shardForKey(lookupText(lookup, valueText(value)), logicalShards),
  });
}

/** Rows per INSERT statement at most (and within PostgreSQL's 65,535 bind parameters). */
const ROWS_PER_STATEMENT = 500;

/**
 * `insertMany` on a table with a lookup: rows split by shard, each shard's rows inserted in one session (one
 * multi-row INSERT per 500 rows) that keeps the lookup at its commit, shards in parallel a few at a time. All rows
 * of one shard commit together or not at all; shards commit independently (see bulk.ts for the plain table's
 * per-server rule), and an error says which rows did not land.
 */
export async function insertManyKept<R extends Row>(
  ctx: RouterContext,
  table: string,
  rows: readonly R[],
  options: InsertManyOptions<R>,
): Promise<ShardflakeId[]> {
  if (!Array.isArray(rows))
    throw new ShardflakeError('INVALID_ARGUMENT', 'insertMany needs an array of rows');
  checkRouting(options as InsertManyOptions<never>);
  if (rows.length === 0) return [];
  const { columns, byShard } = routeRows(rows, options, await ctx.map.fresh());
  const ids: ShardflakeId[] = new Array(rows.length);
  const queue = [...byShard];
  const failed: number[] = [];
  let firstError: unknown;
  const worker = async () => {
    for (let next = queue.shift(); next; next = queue.shift()) {
      const [shard, list] = next;
      try {
        await withShardKept(ctx, { shard }, async (session) => {
          const withIds = await returnsIds(ctx, session, session.schema, table);
          for (let i = 0; i < list.length; i += ROWS_PER_STATEMENT) {
            const part = list.slice(i, i + ROWS_PER_STATEMENT);
            const { rows: got } = await session.query(
              insertRowsSql(session.schema, table, columns, part.length, withIds),
              part.flatMap((r) => columns.map((c) => (rows[r] as R)[c])),
            );
            got.forEach((g, j) => {
              ids[part[j] as number] = BigInt((g as { id: bigint }).id) as ShardflakeId;
            });
          }
        });
      } catch (error) {
        firstError ??= error;
        failed.push(...list);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(4, byShard.size) }, worker));
  if (firstError !== undefined) {
    const e = firstError as { code?: string; message?: string };
    failed.sort((x, y) => x - y);
    throw new ShardflakeError(
      wrapPgError(firstError).code,
      `insertMany into ${table}: ${failed.length} rows did not land (first: row ${failed[0]}): ${e.message ?? String(firstError)}`,
      { detail: `not written: rows ${failed.slice(0, 20).join(', ')}${failed.length > 20 ? ' …' : ''}` },
    );
  }
  // A table keyed otherwise (no `id` column) has no ids to give back (routing/bulk.ts).
  return ctx.statements.hasIdColumn(table) === false ? [] : ids;
}

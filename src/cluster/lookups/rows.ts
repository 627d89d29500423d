import { ShardflakeError } from '../../errors.js';
import type { RouterContext } from '../router/context.js';
import type { InsertOptions, Row } from '../router/rows.js';
import type { ShardSession, ShardTarget } from '../router/session.js';
import type { ShardKey } from '../shard-key.js';
import { withShards } from '../transactions/with-shards.js';

/**
 * A write session of a router that has lookups: a cross transaction of one shard to start with, so the commit can
 * join the entry shards on other servers (lookups/cross.ts). On one server it costs what withShard costs.
 */
export function withShardKept<T>(
  ctx: RouterContext,
  target: ShardTarget,
  fn: (session: ShardSession) => Promise<T> | T,
): Promise<T> {
  return withShards(ctx, [target], (sessions) => fn(sessions[0] as ShardSession));
}

/**
 * The router's single-row calls on a table with a lookup. A plain call is one statement in autocommit, which
 * would commit the row without its entry (and so fails with SF010, ddl.ts): on such a table each call runs as a
 * shard session instead, which applies the captured changes before it commits (maintain.ts).
 */
export async function insertKept(
  ctx: RouterContext,
  table: string,
  row: Row,
  options: InsertOptions,
): Promise<bigint> {
  if (options?.shard === undefined && options?.key === undefined)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      'insert needs a shard key ({ key }) or a shard ({ shard })',
    );
  const columns = Object.keys(row);
  const target = options.shard !== undefined ? { shard: options.shard } : { key: options.key as ShardKey };
  return withShardKept(ctx, target, async (session) => {
    const { rows } = await session.query(
      ctx.statements.insert(session.schema, table, columns),
      columns.map((c) => row[c]),
    );
    return BigInt((rows[0] as { id: bigint }).id);
  });
}

export async function updateKept(
  ctx: RouterContext,
  table: string,
  id: bigint,
  changes: Row,
): Promise<boolean> {
  const columns = Object.keys(changes);
  if (columns.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'update needs at least one column to change');
  return withShardKept(ctx, { id }, async (session) => {
    const result = await session.query(ctx.statements.update(session.schema, table, columns), [
      id,
      ...columns.map((c) => changes[c]),
    ]);
    return (result.rowCount ?? 0) > 0;
  });
}

export async function deleteKept(ctx: RouterContext, table: string, id: bigint): Promise<boolean> {
  return withShardKept(ctx, { id }, async (session) => {
    const result = await session.query(ctx.statements.delete(session.schema, table), [id]);
    return (result.rowCount ?? 0) > 0;
  });
}

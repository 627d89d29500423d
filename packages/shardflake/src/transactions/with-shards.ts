import type { ShardPlacement } from '../catalog/shards.js';
import { ShardflakeError } from '../errors/errors.js';
import type { RouterContext } from '../routing/context.js';
import { type MapState, placementIn } from '../routing/map.js';
import { type AttemptInfo, pause, retryReason, sqlStateOf } from '../routing/retry.js';
import { type ShardSession, type ShardTarget, shardOfTarget } from '../routing/session.js';
import type { Operation } from '../telemetry/events.js';
import { traced } from '../telemetry/trace.js';
import { type CrossInternals, openCrossTransaction } from './cross.js';

/**
 * `router.withShards(targets, fn)`: one session per target (in the targets' order), all committed or none
 * (cross.ts). Shards on one server share its one local transaction; several servers commit with two-phase commit.
 *
 * Retries follow withShard's rules (routing/retry.ts): the whole attempt — every session, fn from the start, on the
 * current map — runs again only when it certainly committed nothing anywhere: a statement hit a fenced copy, a
 * moving shard's cutover lock, a schema moved away, or a participant's node failed over, and the transaction
 * ended rolled back. Once the decision may have committed (COMMIT_UNKNOWN) nothing runs again.
 *
 * Connections are taken one server at a time in name order, so two transactions over the same servers cannot
 * each hold one server's last pooled connection while waiting for the other's.
 */
export async function withShards<T>(
  ctx: RouterContext,
  targets: readonly ShardTarget[],
  fn: (sessions: ShardSession[]) => Promise<T> | T,
  keep: KeepTransaction<CrossInternals>,
): Promise<T> {
  if (!Array.isArray(targets) || targets.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'withShards needs a non-empty array of shard targets');
  if (typeof fn !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'withShards needs a callback that receives the sessions');
  return inCrossTransaction(
    ctx,
    'withShards',
    (map) => targets.map((target) => placementIn(map, shardOfTarget(map, target))),
    keep,
    async (tx, placements) => {
      const servers = [...new Set(placements.map((p) => p.server))].sort();
      for (const server of servers) {
        const first = placements.find((p) => p.server === server);
        if (first) await tx.join(first);
      }
      return fn(await Promise.all(placements.map((p) => tx.join(p))));
    },
  );
}

/**
 * Wraps each transaction as it opens. The router passes the lookups' keeper (lookups/cross.ts `keepLookups`), which
 * applies a lookup's changes at the commit; a parameter, so that transactions need not import the lookups built on
 * top of them.
 */
export type KeepTransaction<X extends CrossInternals> = (tx: CrossInternals) => X;

/**
 * One attempt of `attempt` in a cross transaction over `placementsOf(map)` (wrapped by `keep`), committed when it
 * returns, and run again from the start on the current map as withShards' rules allow.
 */
export function inCrossTransaction<T, X extends CrossInternals>(
  ctx: RouterContext,
  operation: Operation,
  placementsOf: (map: MapState) => ShardPlacement[],
  keep: KeepTransaction<X>,
  attempt: (tx: X, placements: ShardPlacement[]) => Promise<T> | T,
): Promise<T> {
  const { policy } = ctx;
  return traced(ctx.onEvent, operation, async (trace) => {
    const deadline = performance.now() + policy.writeRetryMs;
    let backoff = policy.retryBackoffMs;
    for (let n = 1; ; n++) {
      const map = await ctx.map.fresh();
      const placements = placementsOf(map);
      for (const p of placements) trace?.shard(p.shard);
      const tx = keep(openCrossTransaction(ctx, { trace }));
      try {
        const result = await attempt(tx, placements);
        await tx.commit();
        return result;
      } catch (error) {
        await tx.rollback();
        if (tx.outcome !== 'rolled-back') throw error;
        const info: AttemptInfo = { nodeGone: tx.nodeGone };
        const at = tx.failedAt ?? placements[0];
        const reason = at ? await retryReason(ctx, error, at, true, info) : undefined;
        if (!reason || !at) throw error;
        if (performance.now() >= deadline) {
          if (reason === 'fenced' || reason === 'moving')
            throw new ShardflakeError(
              'SHARD_FENCED',
              `a transaction across shards kept reaching a fenced or moving copy of shard ${at.shard} for ${policy.writeRetryMs} ms`,
              { sqlState: sqlStateOf(error), cause: error },
            );
          throw error;
        }
        const woke = await pause(ctx, reason, map.version, backoff, deadline);
        backoff = Math.min(backoff * 2, policy.maxRetryBackoffMs);
        if (reason === 'fenced' || reason === 'moving')
          policy.onRetry?.({ shard: at.shard, attempt: n, reason, woke });
        trace?.retryReasons.push(reason);
        ctx.onEvent?.({ type: 'retry', operation, shard: at.shard, attempt: n, reason, woke });
      }
    }
  });
}

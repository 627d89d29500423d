import type { ShardPlacement } from '../catalog/shards.js';
import { expectObject, expectOption, optionsObject } from '../errors/arguments.js';
import { isShardflakeError, ShardflakeError } from '../errors/errors.js';
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
 * With `options.retry`, fn also runs again, a bounded number of times, when the transaction was a deadlock's victim
 * or failed a serialization check (see WithShardsOptions).
 *
 * Connections are taken one server at a time in name order, so two transactions over the same servers cannot
 * each hold one server's last pooled connection while waiting for the other's.
 */
export async function withShards<T>(
  ctx: RouterContext,
  targets: readonly ShardTarget[],
  fn: (sessions: ShardSession[]) => Promise<T> | T,
  keep: KeepTransaction<CrossInternals>,
  options?: WithShardsOptions,
): Promise<T> {
  if (!Array.isArray(targets) || targets.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'withShards needs a non-empty array of shard targets');
  if (typeof fn !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'withShards needs a callback that receives the sessions');
  const retry = conflictRetry(options);
  return inCrossTransaction(
    ctx,
    'withShards',
    (map) => targets.map((target) => placementIn(map, shardOfTarget(map, target))),
    keep,
    async (tx, placements) => {
      // The first session of each server joins in server-name order (it takes the connection), the rest at once.
      const sessions: (ShardSession | Promise<ShardSession>)[] = [];
      const servers = [...new Set(placements.map((p) => p.server))].sort();
      for (const server of servers) {
        const i = placements.findIndex((p) => p.server === server);
        sessions[i] = await tx.join(placements[i] as ShardPlacement);
      }
      return fn(await Promise.all(placements.map((p, i) => sessions[i] ?? tx.join(p))));
    },
    retry,
  );
}

/** Options of `router.withShards`. */
export interface WithShardsOptions {
  /**
   * Run fn again from the start when the transaction was chosen as the victim of a deadlock (DEADLOCK, or
   * PostgreSQL's own deadlock within one server, SQLSTATE 40P01) or failed a serialization check (40001) —
   * failures after which nothing of it committed, and which a second run usually does not meet. Off by default:
   * fn must be safe to run again (no effects outside the transaction, or effects that can repeat).
   */
  retry?: {
    /** Runs in all, the first included (at least 1; 1 = no retry). */
    attempts: number;
    /** The wait before the first re-run is random between 0 and this (default 20 ms); it doubles each time. */
    backoffMs?: number;
    /** The longest wait between runs (default 1000 ms). */
    maxBackoffMs?: number;
  };
}

/** How withShards runs fn again after a deadlock or a serialization failure (none by default). */
export interface ConflictRetry {
  attempts: number;
  backoffMs: number;
  maxBackoffMs: number;
}

const NO_RETRY: ConflictRetry = { attempts: 1, backoffMs: 20, maxBackoffMs: 1000 };

/**
 * The retry of the router's single-row writes on tables with lookups (lookups/rows.ts): the call is one statement
 * the router wrote, safe to run again once nothing of it committed, so a deadlock's victim (two writes swapping
 * values whose entries live on different servers, or PostgreSQL's own deadlock) runs again instead of failing.
 */
export const SINGLE_WRITE_RETRY: ConflictRetry = { attempts: 3, backoffMs: 20, maxBackoffMs: 200 };

/** The retry of `options`, checked: one INVALID_ARGUMENT line naming the option that is wrong. */
export function conflictRetry(options: WithShardsOptions | undefined): ConflictRetry {
  const o = optionsObject(options, 'withShards options');
  if (o.retry === undefined) return NO_RETRY;
  const r = expectObject(o.retry, 'retry');
  expectOption(r.attempts, 'retry.attempts', 1);
  if (r.attempts === undefined)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      'retry.attempts is required: how many runs in all (1 or more)',
    );
  expectOption(r.backoffMs, 'retry.backoffMs', 0);
  expectOption(r.maxBackoffMs, 'retry.maxBackoffMs', 0);
  return {
    attempts: r.attempts as number,
    backoffMs: (r.backoffMs as number | undefined) ?? NO_RETRY.backoffMs,
    maxBackoffMs: (r.maxBackoffMs as number | undefined) ?? NO_RETRY.maxBackoffMs,
  };
}

/** Why a rolled-back transaction may run again under `retry`: a deadlock, or a serialization failure. */
function conflictReason(error: unknown): 'deadlock' | 'serialization' | undefined {
  if (isShardflakeError(error, 'DEADLOCK')) return 'deadlock';
  const state = sqlStateOf(error);
  if (state === '40P01') return 'deadlock';
  if (state === '40001') return 'serialization';
  return undefined;
}

/**
 * Wraps each transaction as it opens. The router passes the lookups' keeper (lookups/cross.ts `keepLookups`), which
 * applies a lookup's changes at the commit; a parameter, so that transactions need not import the lookups built on
 * top of them.
 */
export type KeepTransaction<X extends CrossInternals> = (tx: CrossInternals) => X;

/**
 * One attempt of `attempt` in a cross transaction over `placementsOf(map)` (wrapped by `keep`), committed when it
 * returns, and run again from the start on the current map as withShards' rules allow (and `retry`'s).
 */
export function inCrossTransaction<T, X extends CrossInternals>(
  ctx: RouterContext,
  operation: Operation,
  placementsOf: (map: MapState) => ShardPlacement[],
  keep: KeepTransaction<X>,
  attempt: (tx: X, placements: ShardPlacement[]) => Promise<T> | T,
  retry: ConflictRetry = NO_RETRY,
): Promise<T> {
  const { policy } = ctx;
  return traced(ctx.onEvent, operation, async (trace) => {
    const deadline = performance.now() + policy.writeRetryMs;
    // The first attempt's start: every attempt carries it, so a re-run keeps its age (deadlocks/tag.ts).
    const born = Date.now();
    let backoff = policy.retryBackoffMs;
    let runs = 0;
    for (let n = 1; ; n++) {
      const map = await ctx.map.fresh();
      const placements = placementsOf(map);
      for (const p of placements) trace?.shard(p.shard);
      const tx = keep(openCrossTransaction(ctx, { trace, born }));
      runs++;
      try {
        const result = await attempt(tx, placements);
        await tx.commit();
        return result;
      } catch (thrown) {
        await tx.rollback();
        // The victim of a deadlock is told so, whatever fn made of the cancelled statement.
        const error = tx.victim ?? thrown;
        if (tx.outcome !== 'rolled-back') throw error;
        const conflict = conflictReason(error);
        if (conflict && runs < retry.attempts) {
          const cap = Math.min(retry.backoffMs * 2 ** (runs - 1), retry.maxBackoffMs);
          // Full jitter: transactions that met in a deadlock do not meet again at the same moment.
          await new Promise((resolve) => setTimeout(resolve, Math.random() * cap));
          const shard = placements[0]?.shard ?? 0;
          trace?.retryReasons.push(conflict);
          ctx.onEvent?.({ type: 'retry', operation, shard, attempt: n, reason: conflict, woke: 'timeout' });
          continue;
        }
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

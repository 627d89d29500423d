import type { ShardPlacement } from '../catalog/shards.js';
import { isShardflakeError, ShardflakeError, sqlStateOf } from '../errors/errors.js';
import { FENCED_SQLSTATE } from '../fence/fence.js';
import type { Operation, RetryReason } from '../telemetry/events.js';
import type { OperationTrace } from '../telemetry/trace.js';
import type { RouterContext } from './context.js';
import { type MapState, placementIn } from './map.js';

/**
 * When a routed operation may run again, and how long it waits first.
 *
 * An attempt may be re-run only when it certainly changed nothing:
 * - `fenced`: a write hit the fence of a moved-away copy (SQLSTATE SF001). The fence is a BEFORE trigger, so the
 *   statement failed before writing and its transaction is aborted. The retry waits for the map that moves the
 *   shard (the cutover's NOTIFY), or re-reads the map after a backoff.
 * - `moving`: a write on a shard the map says is moving failed the way a cutover makes writes fail: waiting for
 *   its table lock (lock or statement timeout 55P03/57014, a deadlock 40P01, a serialization failure 40001). Any
 *   other error (a constraint, an unknown column, the DDL guard's 55006) is the caller's, reported at once: a move's
 *   copy phase can last minutes, and retrying a genuine error for `writeRetryMs` would only hide it.
 * - `unknown-table`: a table or schema that is not there (42P01, 3F000) on a shard whose placement turns out to
 *   have changed when the map is re-read: the schema was moved away under an old map. A table that is simply
 *   missing (the map did not change) is the caller's error, reported at once.
 * - `failover`: ServerNodes says the node is gone or no longer the primary, and the attempt knows its transaction
 *   did not reach COMMIT (`AttemptInfo.nodeGone`, set only then). A connection lost while COMMIT was in flight is
 *   COMMIT_UNKNOWN instead, which is never retried: the transaction may have committed, and running it again
 *   could apply it twice.
 * Each retry runs the whole attempt again: a new lease, the current map, fn from the start.
 */
/**
 * The wait before a retry. Fenced or moving: until a map newer than `version` arrives (the cutover's NOTIFY), or
 * the backoff ends, after which the map is re-read anyway (a notification may have been lost, or LISTEN is off).
 * Failover: a short pause (the next acquire finds the roles again). Unknown table: none, the map was re-read.
 */
export async function pause(
  ctx: RouterContext,
  reason: RetryReason,
  version: bigint,
  backoff: number,
  deadline: number,
): Promise<'map' | 'timeout'> {
  if (reason === 'fenced' || reason === 'moving') {
    const woke = await ctx.map.newerMap(
      version,
      Math.min(backoff, Math.max(0, deadline - performance.now())),
    );
    if (woke === 'timeout') ctx.map.markStale();
    return woke;
  }
  if (reason === 'failover') await new Promise((resolve) => setTimeout(resolve, Math.min(backoff, 50)));
  return 'map';
}

/** Filled in by an attempt for the retry policy. */
export interface AttemptInfo {
  /** The node went away (or stopped being the primary) and the attempt's transaction did not reach COMMIT. */
  nodeGone: boolean;
}

/** The SQLSTATE of an error, looking through wrappers (ShardflakeError, Drizzle's query error: `cause`). */
export { sqlStateOf };

const MISSING_RELATION = ['42P01', '3F000'];
/** How a write fails while a cutover holds its shard's tables (see `moving` above). */
const CUTOVER_STATES = ['55P03', '57014', '40P01', '40001'];

/**
 * Runs `attempt` on the shard's current home, again on a retriable failure (see above), for up to
 * `policy.writeRetryMs`. `shardOf` is asked for the shard under each map (a key's shard never changes, but the
 * map that resolves it may be newer).
 */
export async function routed<T>(
  ctx: RouterContext,
  operation: Operation,
  trace: OperationTrace | undefined,
  shardOf: (map: MapState) => number,
  write: boolean,
  attempt: (placement: ShardPlacement, info: AttemptInfo) => Promise<T>,
): Promise<T> {
  const { policy } = ctx;
  const deadline = performance.now() + policy.writeRetryMs;
  let backoff = policy.retryBackoffMs;
  let finalTry = false;
  for (let n = 1; ; n++) {
    const map = await ctx.map.fresh();
    const shard = shardOf(map);
    const placement = placementIn(map, shard);
    trace?.shard(shard);
    const info: AttemptInfo = { nodeGone: false };
    try {
      return await attempt(placement, info);
    } catch (error) {
      const reason = await retryReason(ctx, error, placement, write, info);
      if (!reason) throw error;
      if (performance.now() >= deadline && reason === 'fenced' && !finalTry) {
        // A write that waited on a cutover's lock longer than writeRetryMs and then hit the fence changed nothing;
        // if the shard has moved meanwhile (the switch follows the fence within the move's bounded pause), it
        // tries the new home once before failing.
        finalTry = true;
        if ((await ctx.map.newerMap(map.version, Math.max(policy.maxRetryBackoffMs, 1000))) === 'timeout')
          ctx.map.markStale();
        const now = placementIn(await ctx.map.fresh(), shard);
        if (now.server !== placement.server) {
          policy.onRetry?.({ shard, attempt: n, reason, woke: 'map' });
          trace?.retryReasons.push(reason);
          ctx.onEvent?.({ type: 'retry', operation, shard, attempt: n, reason, woke: 'map' });
          continue;
        }
      }
      if (performance.now() >= deadline) {
        if (reason === 'fenced' || reason === 'moving')
          throw new ShardflakeError(
            'SHARD_FENCED',
            `a write to shard ${shard} kept reaching a fenced or moving copy for ${policy.writeRetryMs} ms`,
            { sqlState: sqlStateOf(error), cause: error },
          );
        throw error;
      }
      const woke = await pause(ctx, reason, map.version, backoff, deadline);
      backoff = Math.min(backoff * 2, policy.maxRetryBackoffMs);
      if (reason === 'fenced' || reason === 'moving') policy.onRetry?.({ shard, attempt: n, reason, woke });
      // 'unknown-table': retryReason has already re-read the map, which moved the shard.
      trace?.retryReasons.push(reason);
      // ctx.onEvent already ignores a throwing hook.
      ctx.onEvent?.({ type: 'retry', operation, shard, attempt: n, reason, woke });
    }
  }
}

/** Why a failed attempt may run again, or undefined when it must not (see the comment at the top). */
export async function retryReason(
  ctx: RouterContext,
  error: unknown,
  placement: ShardPlacement,
  write: boolean,
  info: AttemptInfo,
): Promise<RetryReason | undefined> {
  if (isShardflakeError(error, 'COMMIT_UNKNOWN') || isShardflakeError(error, 'SESSION_CLOSED'))
    return undefined;
  const state = sqlStateOf(error);
  if (state === FENCED_SQLSTATE) return 'fenced';
  if (info.nodeGone) return 'failover';
  if (write && placement.state === 'moving' && state !== undefined && CUTOVER_STATES.includes(state))
    return 'moving';
  if (state !== undefined && MISSING_RELATION.includes(state)) {
    ctx.map.markStale();
    const map = await ctx.map.fresh();
    const now = map.shards[placement.shard];
    if (now && (now.server !== placement.server || now.schema !== placement.schema)) return 'unknown-table';
  }
  return undefined;
}

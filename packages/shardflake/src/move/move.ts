/*
 * move/: Online moves of logical shards between servers: one engine for a shard or a set (copy at a snapshot,
 * logical replication, verify, fenced cutover, crash-safe settle), cleanup of old copies, and the rebalance
 * planner.
 *
 * May import: errors, postgres, config, topology, catalog, fence, recovery, reference, admin.
 */
import type { ClusterConfig } from '../config/config.js';
import { moveSets } from './engine.js';
import type { MoveOptions, MoveResult, SetMoveOptions } from './options.js';

export { isInterrupted } from './connections.js';
export { moveSets } from './engine.js';
export type { MoveOptions, MoveProgress, MoveResult, MoveStep, VerifyMode } from './options.js';
export { VERIFY_MODES } from './options.js';

/**
 * `cluster move`: moves logical shards' schemas to another server while the application keeps writing. The public
 * calls are thin: every move runs on the one engine (engine.ts), a single shard's move being a set of one.
 *
 * 1. Checks (shards and servers exist, not already there, primary keys, schema version, replication limits) and
 *    records one move per shard; the shards turn `moving`, so migrations refuse them until the move ends.
 * 2. Creates the shards on the target from the cluster's templates, empty and fenced; a publication on the source.
 * 3. Copies every table at the snapshot of a new replication slot, builds the deferred indexes, and subscribes the
 *    target to that slot.
 * 4. Waits until the target has received the source's WAL up to a recent LSN.
 * 5. Cutover (cutover.ts), in one source transaction per group of shards: lock, verify, raise the generators,
 *    fence the old copies, commit; then the switch: the target copies are opened and the catalog places the shards
 *    on the target (new map version, NOTIFY). Writers that waited on the lock hit the fence (SF001); the router
 *    refreshes its map and retries them on the target.
 * 6. Drops subscription, publication and slot. The fenced old copies stay until `cluster cleanup`.
 *
 * Each step is recorded in `shardflake.moves` after it happened, and each is idempotent, so rerunning the command
 * after a crash resumes where the last run stopped. A move that fails before its switch rolls back: the target
 * copy and every replication object are removed and the shard is `active` on its source again. A crash inside
 * the cutover's transaction releases the lock with the crashed connection, so writes resume on the source, still
 * the only writable copy.
 */

/** Moves one shard to server `to`, or resumes the interrupted move (or set) it belongs to. */
export async function moveShard(
  config: ClusterConfig,
  shard: number,
  to: string,
  options: MoveOptions = {},
): Promise<MoveResult> {
  const [result] = await moveSets(config, [{ shard, to }], options);
  return result as MoveResult;
}

/** Moves several shards to `to` together, as one set per source server (one replication stream each). */
export async function moveShards(
  config: ClusterConfig,
  shards: readonly number[],
  to: string,
  options: SetMoveOptions = {},
): Promise<MoveResult[]> {
  return moveSets(
    config,
    shards.map((shard) => ({ shard, to })),
    options,
  );
}

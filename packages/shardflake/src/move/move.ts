import type pg from 'pg';
import type { ClusterConfig } from '../cluster/config.js';
import { clusterHistory } from '../cluster/migrations.js';
import { ensureReferenceOn } from '../cluster/reference/before-move.js';
import { lockShard, unlockShard } from '../cluster/shard-lock.js';
import { isShardflakeError, ShardflakeError } from '../errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { DEFAULTS, type MoveOptions, type MoveResult, type Options, type SetMoveOptions } from './options.js';
import { reached } from './phases.js';
import { createMove, installMoves, streamId, unfinishedMove } from './record.js';
import { replicationNames } from './replication.js';
import {
  checkpoint,
  countRows,
  inTransaction,
  isInterrupted,
  newSession,
  openServer,
  readPlacement,
  type Session,
  setShardState,
} from './session.js';
import { moveShardSet } from './set.js';
import { rollBackMove, settleMove } from './settle.js';
import { cutover, finish, preflight, prepare, subscribe, switchCatalog, waitSynced } from './steps.js';
import { listTables, type SourceTable } from './tables.js';

export type { MoveOptions, MoveProgress, MoveResult, MoveStep, VerifyMode } from './options.js';
export { VERIFY_MODES } from './options.js';
export { isInterrupted } from './session.js';

/**
 * `cluster move`: moves one logical shard's schema to another server while the application keeps writing.
 *
 * 1. Checks (shard and server exist, not already there, primary keys, schema version) and records the move;
 *    the shard turns `moving`, so migrations refuse it until the move ends.
 * 2. Creates the shard on the target from the cluster's templates, empty; publication on the source.
 * 3. Subscription on the target: initial COPY of every table, then streaming of the changes made meanwhile.
 * 4. Waits until every table is copied and the target has received the source's WAL up to a recent LSN.
 * 5. Cutover, in one source transaction: LOCK every table IN EXCLUSIVE MODE (reads go on, writes wait), wait until
 *    the target has received the source's current LSN, compare row counts and checksums of every table on both
 *    sides (or, with `verify: 'snapshots'`, counts here and checksums before, on pinned snapshots), raise the
 *    target's generator above every id the source issued, install the fence, COMMIT.
 * 6. The target copy (fenced while it filled) is opened, and the catalog places the shard on it (state active, new
 *    map version, NOTIFY). Writers that waited on the lock hit the fence (SF001); the router refreshes its map and
 *    retries them on the target.
 *
 * The steps themselves live in move-steps.ts, the per-run state in move-session.ts.
 * 7. Drops subscription, publication and slots. The fenced old copy stays until `cluster cleanup`.
 *
 * Each step is recorded in `shardflake.moves` after it happened, and each is idempotent, so rerunning the command
 * after a crash resumes where the last run stopped. A move that fails before step 6 rolls back: the target copy
 * and every replication object are removed and the shard is `active` on its source again. A crash inside step 5
 * releases the lock with the crashed connection, so writes resume on the source, still the only writable copy.
 */

async function drive(s: Session): Promise<void> {
  let pausedAt: number | null = null;
  if (s.record.phase === 'planned') await prepare(s);
  if (s.record.phase === 'prepared') await subscribe(s);
  if (s.record.phase === 'subscribed') await waitSynced(s);
  if (s.record.phase === 'synced') pausedAt = await cutover(s);
  if (s.record.phase === 'fenced') await switchCatalog(s, pausedAt);
  if (s.record.phase === 'switched') await finish(s);
}

/** Moves one shard to server `to`, or resumes the interrupted move of it to `to`. */
export async function moveShard(
  config: ClusterConfig,
  shard: number,
  to: string,
  options: MoveOptions = {},
): Promise<MoveResult> {
  const moved = await moveOne(config, shard, to, options);
  if (moved !== 'in-a-set') return moved;
  // The shard's unfinished move belongs to a set: resume (or settle) the whole set, which shares its stream.
  const [result] = await moveShardSet(config, [shard], to, options);
  return result as MoveResult;
}

async function moveOne(
  config: ClusterConfig,
  shard: number,
  to: string,
  options: MoveOptions,
): Promise<MoveResult | 'in-a-set'> {
  const opts: Options = { ...DEFAULTS, ...options };
  if (!Number.isInteger(shard) || shard < 0 || shard >= config.logicalShards) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      `shard ${shard} is not one of the cluster's ${config.logicalShards} logical shards (0–${config.logicalShards - 1})`,
    );
  }
  if (!(to in config.servers)) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `server ${JSON.stringify(to)} is not in the config (servers: ${Object.keys(config.servers).join(', ')})`,
    );
  }
  const catalog = await openServer(config, config.catalog);
  let source: pg.Client | undefined;
  let target: pg.Client | undefined;
  let locked = false;
  let session: Session | undefined;
  try {
    // The target copy is made from the cluster's recorded history, not from whatever the config still lists.
    config = await clusterHistory(catalog, config);
    await installMoves(catalog);
    await lockShard(catalog, shard);
    locked = true;
    let record = await unfinishedMove(catalog, shard);
    if (record?.batchId != null) return 'in-a-set';
    if (record && record.to !== to) {
      await settleMove(config, catalog, record, `superseded by a move to server ${to}`);
      record = null;
    }
    const placement = await readPlacement(catalog, shard);
    const resumedFrom = record?.phase ?? null;
    if (!record && placement.server === to) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `shard ${shard} is already on server ${to}; nothing to move`,
      );
    }
    const from = record?.from ?? placement.server;
    source = await openServer(config, from);
    try {
      target = await openServer(config, to);
    } catch (error) {
      if (record && !reached(record.phase, 'switched')) {
        await rollBackMove(
          config,
          catalog,
          record,
          `target unreachable on resume: ${(error as Error).message}`,
        );
      }
      throw error;
    }
    let tables: SourceTable[];
    if (!record) {
      await ensureReferenceOn(config, to); // reference tables complete on the target first (SPEC G2)
      tables = await preflight(config, shard, placement.schema, from, to, source, target);
      record = await inTransaction(catalog, async () => {
        const created = await createMove(catalog, {
          shard,
          schema: placement.schema,
          from,
          to,
          owner: opts.owner ?? `${process.env.HOSTNAME ?? 'localhost'}:${process.pid}`,
        });
        await setShardState(catalog, shard, 'moving');
        return created;
      });
    } else {
      tables = await listTables(source, record.schema);
    }
    session = newSession({
      config,
      opts,
      catalog,
      source,
      target,
      record,
      names: replicationNames(streamId(record)),
      tables,
    });
    if (!resumedFrom) await checkpoint(session, 'planned');
    try {
      await drive(session);
    } catch (error) {
      if (isInterrupted(error)) throw error;
      const reason = isShardflakeError(error) ? error.message : wrapPgError(error).message;
      if (!reached(session.record.phase, 'switched')) {
        const undone = await rollBackMove(config, catalog, session.record, reason).then(
          () => null,
          (e: unknown) => (e as Error).message,
        );
        throw new ShardflakeError(
          'MOVE_FAILED',
          undone === null
            ? `move of shard ${shard} to server ${to} failed and was rolled back (shard ${shard} stays on server ${from}): ${reason}`
            : `move of shard ${shard} to server ${to} failed (${reason}) and could not be rolled back yet (${undone}); shard ${shard} is still served by server ${from}: run the command again or shardflake cluster cleanup`,
          { cause: error },
        );
      }
      throw new ShardflakeError(
        'MOVE_FAILED',
        `shard ${shard} now lives on server ${to}, but finishing the move failed; run the command again: ${reason}`,
        { cause: error },
      );
    }
    const s = session;
    // A run that resumed after the comparison still reports the shard's size.
    if (s.rows === 0n) s.rows = await countRows(s.target, s.record.schema, s.tables);
    return {
      moveId: s.record.id,
      shard,
      schema: s.record.schema,
      from,
      to,
      resumedFrom,
      rows: s.rows,
      tables: s.tables.length,
      copyMs: s.copyMs,
      indexAndCatchUpMs: s.indexMs,
      rowsPerSecond: s.copyMs ? Math.round((Number(s.copiedRows) * 1000) / s.copyMs) : null,
      pauseMs: s.pauseMs,
      pauseSteps: s.pauseSteps,
      verify: s.opts.verify,
      snapshotPauseMs: s.snapshot?.pauseMs ?? null,
      snapshotCompareMs: s.snapshot?.compareMs ?? null,
      mapVersion: s.mapVersion,
    };
  } catch (error) {
    throw isShardflakeError(error) ? error : wrapPgError(error);
  } finally {
    if (locked) await unlockShard(catalog, shard).catch(() => {});
    await Promise.all([catalog, source, target].map((c) => c?.end().catch(() => {})));
  }
}

/**
 * Moves several shards to `to` together, as one set per source server (set.ts: one replication stream, one copy,
 * cutover in groups), with either verification mode.
 */
export async function moveShards(
  config: ClusterConfig,
  shards: readonly number[],
  to: string,
  options: SetMoveOptions = {},
): Promise<MoveResult[]> {
  return moveShardSet(config, shards, to, options);
}

import type pg from 'pg';
import { isShardflakeError, ShardflakeError } from '../errors.js';
import { wrapPgError } from '../postgres/connect.js';
import type { ClusterConfig } from './config.js';
import { isFenced, unfenceSql } from './fence.js';
import {
  dropPublication,
  dropSchema,
  dropSlots,
  dropSubscription,
  listTables,
  replicationNames,
  type SourceTable,
} from './move-copy.js';
import { ddlPastGuard, unguardSchema } from './move-ddl-guard.js';
import { type MovePhase, reached } from './move-phases.js';
import {
  createMove,
  installMoves,
  lockShard,
  type MoveRecord,
  recordPhase,
  unfinishedMove,
  unlockShard,
} from './move-record.js';

import {
  checkpoint,
  connectServer,
  countRows,
  DEFAULTS,
  inTransaction,
  isInterrupted,
  newSession,
  type Options,
  readPlacement,
  type Session,
  setShardState,
} from './move-session.js';
import { cutover, finish, preflight, prepare, subscribe, switchCatalog, waitSynced } from './move-steps.js';

export { isInterrupted } from './move-session.js';

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
export interface MoveOptions {
  /** Called on each phase and while copying. */
  onProgress?: (progress: MoveProgress) => void;
  /** Stops the move at the next check (like a crash: nothing is rolled back; a rerun resumes). */
  signal?: AbortSignal;
  /**
   * Test hook: after recording this phase, the move drops its connections without a word and stops, as a killed
   * process would. `cutover-locked` stops while the source is locked, before the fence commits.
   */
  stopAfter?: MoveStep;
  /** Awaited at each step (after its phase is recorded): lets a test hold a real process there and kill it. */
  afterStep?: (step: MoveStep) => Promise<void> | void;
  /** Longest wait for the source's table locks at cutover (default 2000 ms); it is retried `cutoverAttempts` times. */
  lockTimeoutMs?: number;
  cutoverAttempts?: number;
  /** Longest wait, with writes paused, for the target to catch up and match (default 10 000 ms). */
  cutoverTimeoutMs?: number;
  /** Longest wait for the initial copy and catch-up (default 30 minutes). */
  syncTimeoutMs?: number;
  /** Names this process in the move record (default host:pid). */
  owner?: string;
  /**
   * Where the row-by-row comparison of both copies happens (default `in-pause`):
   * - `in-pause`: counts and checksums of every table while writes are paused, right before the switch. Safest;
   *   the pause grows with the shard's size (about 1 ms per 1,000 rows on a small machine).
   * - `snapshots`: checksums on consistent snapshots pinned during a short earlier pause (VDiff-style, see
   *   move-snapshots.ts), then only row counts in the cutover pause. For big shards.
   */
  verify?: VerifyMode;
}

export const VERIFY_MODES = ['in-pause', 'snapshots'] as const;
export type VerifyMode = (typeof VERIFY_MODES)[number];

/** Points where a move can be stopped: after each recorded phase, and inside the cutover with the source locked. */
export type MoveStep = MovePhase | 'cutover-locked';

export interface MoveProgress {
  shard: number;
  moveId: bigint;
  phase: MovePhase | 'copying';
  copiedRows: bigint;
  totalRows: bigint;
}

export interface MoveResult {
  moveId: bigint;
  shard: number;
  schema: string;
  from: string;
  to: string;
  /** The phase a previous, interrupted run had reached (null for a fresh move). */
  resumedFrom: MovePhase | null;
  /** Rows in the shard when the copies were compared. */
  rows: bigint;
  tables: number;
  /** Time of the initial copy, subscription start to every table ready (null when a previous run did it). */
  copyMs: number | null;
  /** Time to build the deferred indexes and catch up after the copy. */
  indexAndCatchUpMs: number | null;
  rowsPerSecond: number | null;
  /** Writes were paused (source locked) until the catalog switched, in ms. */
  pauseMs: number | null;
  /** Where the pause went, in ms: waiting for the locks, target catch-up, verification, generator + fence, catalog. */
  pauseSteps: Record<string, number>;
  verify: VerifyMode;
  /** With `verify: 'snapshots'`: the short pause that pinned both snapshots, and the comparison after it (ms). */
  snapshotPauseMs: number | null;
  snapshotCompareMs: number | null;
  mapVersion: bigint;
}

// ---------------------------------------------------------------------------------------------------- rollback

/**
 * Undoes a move that has not switched: target copy and subscription dropped, source unfenced, publication and
 * slots dropped, shard active on its source. A target that cannot be reached keeps its subscription (now without
 * a slot, so it copies nothing); `cluster cleanup` drops it later.
 */
export async function rollBackMove(
  config: ClusterConfig,
  catalog: pg.Client,
  record: MoveRecord,
  reason: string,
): Promise<void> {
  const placement = await readPlacement(catalog, record.shard);
  if (placement.server !== record.from) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `move #${record.id} already switched shard ${record.shard} to server ${placement.server}; it can only be finished`,
    );
  }
  const names = replicationNames(record.id);
  // Fresh connections: the move's own may be dead or inside an aborted transaction.
  const source = await connectServer(config, record.from);
  const target = await connectServer(config, record.to).catch(() => undefined);
  try {
    const leftovers: string[] = [];
    try {
      if (!target) throw new Error(`server ${record.to} is unreachable`);
      await dropSubscription(target, names.subscription, true);
      await dropSchema(target, record.schema);
    } catch (error) {
      leftovers.push(
        `subscription ${names.subscription} and schema ${record.schema} on server ${record.to} (${(error as Error).message}; cluster cleanup drops them)`,
      );
    }
    if (await isFenced(source, record.schema)) await ddlPastGuard(source, unfenceSql(record.schema));
    await dropPublication(source, names.publication);
    await dropSlots(source, names.slot, record.subscriptionOid);
    await unguardSchema(source, record.schema);
    await inTransaction(catalog, async () => {
      if (placement.state !== 'active') await setShardState(catalog, record.shard, 'active');
      await recordPhase(catalog, record.id, 'rolled_back', {
        error: [reason, ...leftovers.map((l) => `left: ${l}`)].join('; '),
      });
    });
  } finally {
    await Promise.all([source.end().catch(() => {}), target?.end().catch(() => {})]);
  }
}

// ---------------------------------------------------------------------------------------------------- driver

async function drive(s: Session): Promise<void> {
  let pausedAt: number | null = null;
  if (s.record.phase === 'planned') await prepare(s);
  if (s.record.phase === 'prepared') await subscribe(s);
  if (s.record.phase === 'subscribed') await waitSynced(s);
  if (s.record.phase === 'synced') pausedAt = await cutover(s);
  if (s.record.phase === 'fenced') await switchCatalog(s, pausedAt);
  if (s.record.phase === 'switched') await finish(s);
}

/** Finishes (switched) or rolls back (otherwise) an unfinished move found in the catalog. */
export async function settleMove(
  config: ClusterConfig,
  catalog: pg.Client,
  record: MoveRecord,
  reason: string,
): Promise<'finished' | 'rolled_back'> {
  if (!reached(record.phase, 'switched')) {
    await rollBackMove(config, catalog, record, reason);
    return 'rolled_back';
  }
  const source = await connectServer(config, record.from);
  const target = await connectServer(config, record.to).catch(async (e) => {
    await source.end();
    throw e;
  });
  try {
    const s = newSession({
      config,
      opts: { ...DEFAULTS },
      catalog,
      source,
      target,
      record,
      names: replicationNames(record.id),
      tables: await listTables(source, record.schema),
    });
    await finish(s);
    return 'finished';
  } finally {
    await Promise.all([source.end().catch(() => {}), target.end().catch(() => {})]);
  }
}

/** Moves one shard to server `to`, or resumes the interrupted move of it to `to`. */
export async function moveShard(
  config: ClusterConfig,
  shard: number,
  to: string,
  options: MoveOptions = {},
): Promise<MoveResult> {
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
  const catalog = await connectServer(config, config.catalog);
  let source: pg.Client | undefined;
  let target: pg.Client | undefined;
  let locked = false;
  let session: Session | undefined;
  try {
    await installMoves(catalog);
    await lockShard(catalog, shard);
    locked = true;
    let record = await unfinishedMove(catalog, shard);
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
    source = await connectServer(config, from);
    try {
      target = await connectServer(config, to);
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
      names: replicationNames(record.id),
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

/** Moves several shards to `to`, one after another. */
export async function moveShards(
  config: ClusterConfig,
  shards: readonly number[],
  to: string,
  options: MoveOptions = {},
): Promise<MoveResult[]> {
  const results: MoveResult[] = [];
  for (const shard of shards) results.push(await moveShard(config, shard, to, options));
  return results;
}

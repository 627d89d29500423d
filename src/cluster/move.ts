import type pg from 'pg';
import { isShardflakeError, ShardflakeError } from '../errors.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import { bumpMapVersion, type ShardState } from './catalog.js';
import { type ClusterConfig, targetVersion } from './config.js';
import { fenceSql, isFenced, unfenceSql } from './fence.js';
import {
  buildDeferredIndexes,
  createPublication,
  createSubscription,
  createTargetSchema,
  currentLsn,
  dropPublication,
  dropSchema,
  dropSlots,
  dropSubscription,
  listTables,
  type ReplicationNames,
  replicationNames,
  requirePrimaryKeys,
  type SourceTable,
  schemaExists,
  subscriptionProgress,
} from './move-copy.js';
import { moveGeneratorState } from './move-generator.js';
import { type MovePhase, reached } from './move-phases.js';
import {
  createMove,
  installMoves,
  lockShard,
  type MoveRecord,
  recordPhase,
  recordSubscriptionOid,
  unfinishedMove,
  unlockShard,
} from './move-record.js';
import { verifyOnSnapshots } from './move-snapshots.js';
import { compareDigests, countTables, digestTables, verificationError } from './move-verify.js';
import { MIGRATIONS_TABLE } from './shard-ddl.js';

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
 *    sides, raise the target's generator above every id the source issued, install the fence, COMMIT.
 * 6. Catalog: the shard now lives on the target (state active, new map version, NOTIFY). Writers that waited on
 *    the lock hit the fence (SF001); the router refreshes its map and retries them on the target.
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

const DEFAULTS = {
  verify: 'in-pause' as VerifyMode,
  lockTimeoutMs: 2000,
  cutoverAttempts: 3,
  cutoverTimeoutMs: 10_000,
  syncTimeoutMs: 30 * 60_000,
  pollMs: 20,
};

type Options = MoveOptions & typeof DEFAULTS;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The interruption of the test hook or an aborted signal: no rollback, the rerun resumes. */
class MoveInterrupted extends ShardflakeError {
  constructor(message: string) {
    super('MOVE_FAILED', message, { detail: 'interrupted' });
  }
}

export function isInterrupted(error: unknown): boolean {
  return error instanceof MoveInterrupted;
}

interface Session {
  config: ClusterConfig;
  opts: Options;
  catalog: pg.Client;
  source: pg.Client;
  target: pg.Client;
  record: MoveRecord;
  names: ReplicationNames;
  tables: SourceTable[];
  copyMs: number | null;
  pauseMs: number | null;
  pauseSteps: Record<string, number>;
  indexMs: number | null;
  copiedRows: bigint;
  rows: bigint;
  snapshot: { pauseMs: number; compareMs: number } | null;
  mapVersion: bigint;
}

async function connectServer(config: ClusterConfig, server: string): Promise<pg.Client> {
  const url = config.servers[server];
  if (url === undefined) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `server ${JSON.stringify(server)} is not in the config (servers: ${Object.keys(config.servers).join(', ')})`,
    );
  }
  try {
    return await connect(url, { applicationName: 'shardflake move', connectTimeoutMs: 5000 });
  } catch (error) {
    const e = wrapPgError(error, url);
    throw new ShardflakeError(e.code, `server ${server}: ${e.message}`, { cause: error });
  }
}

/** Ends a client's connection at once, as a killed process would (the server rolls back its transaction). */
function kill(client: pg.Client | undefined): void {
  const stream = (client as unknown as { connection?: { stream?: { destroy(): void } } } | undefined)
    ?.connection?.stream;
  stream?.destroy();
}

async function checkpoint(s: Session, phase: MoveStep | null): Promise<void> {
  if (phase !== null) await s.opts.afterStep?.(phase);
  if ((phase !== null && s.opts.stopAfter === phase) || s.opts.signal?.aborted) {
    kill(s.source);
    kill(s.target);
    kill(s.catalog);
    throw new MoveInterrupted(
      `move #${s.record.id} of shard ${s.record.shard} stopped after ${phase ?? s.record.phase}; run the command again to resume or roll it back`,
    );
  }
}

async function advance(s: Session, phase: MovePhase, extra: { pauseMs?: number; rowsCopied?: bigint } = {}) {
  await recordPhase(s.catalog, s.record.id, phase, extra);
  s.record = { ...s.record, phase };
  s.opts.onProgress?.({
    shard: s.record.shard,
    moveId: s.record.id,
    phase,
    copiedRows: s.rows,
    totalRows: s.rows,
  });
  await checkpoint(s, phase);
}

async function readPlacement(
  catalog: pg.Client,
  shard: number,
): Promise<{ server: string; schema: string; state: ShardState }> {
  const { rows } = await catalog.query(
    'SELECT server, schema_name, state FROM shardflake.shards WHERE shard = $1',
    [shard],
  );
  const row = rows[0] as { server: string; schema_name: string; state: ShardState } | undefined;
  if (!row) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      `shard ${shard} is not in the shard map; run cluster init first`,
    );
  }
  return { server: row.server, schema: row.schema_name, state: row.state };
}

async function inTransaction<T>(client: pg.Client, work: () => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    const result = await work();
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

async function setShardState(catalog: pg.Client, shard: number, state: ShardState, server?: string) {
  const version = await bumpMapVersion(catalog);
  await catalog.query(
    'UPDATE shardflake.shards SET state = $2, server = coalesce($3, server), changed_in_version = $4 WHERE shard = $1',
    [shard, state, server ?? null, version],
  );
  return version;
}

async function countRows(client: pg.Client, schema: string, tables: readonly SourceTable[]): Promise<bigint> {
  if (tables.length === 0) return 0n;
  const { rows } = await client.query(
    `SELECT (${tables.map((t) => `(SELECT count(*) FROM ${qualified(schema, t.name)})`).join(' + ')})::bigint AS n`,
  );
  return BigInt((rows[0] as { n: bigint }).n);
}

async function schemaVersion(client: pg.Client, schema: string): Promise<number | null> {
  const { rows } = await client.query(
    `SELECT max(version)::int AS v FROM ${qualified(schema, MIGRATIONS_TABLE)}`,
  );
  return (rows[0] as { v: number | null }).v;
}

/** Checks that must pass before a fresh move changes anything. */
async function preflight(
  config: ClusterConfig,
  shard: number,
  schema: string,
  from: string,
  to: string,
  source: pg.Client,
  target: pg.Client,
): Promise<SourceTable[]> {
  const wal = await source.query('SHOW wal_level');
  if ((wal.rows[0] as { wal_level: string }).wal_level !== 'logical') {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `server ${from} runs with wal_level=${(wal.rows[0] as { wal_level: string }).wal_level}; shard moves need wal_level=logical`,
    );
  }
  // The subscription needs one slot for itself and, while copying, up to max_sync_workers_per_subscription more.
  const slots = await source.query(
    `SELECT current_setting('max_replication_slots')::int AS max, (SELECT count(*)::int FROM pg_replication_slots) AS used,
            current_setting('max_wal_senders')::int AS senders`,
  );
  const { max, used, senders } = slots.rows[0] as { max: number; used: number; senders: number };
  if (max - used < 1 || senders < 1) {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `server ${from} has no free replication slot (max_replication_slots=${max}, ${used} in use, max_wal_senders=${senders}); run shardflake cluster cleanup or raise the limits`,
    );
  }
  if (!(await schemaExists(source, schema))) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `the catalog places shard ${shard} on server ${from}, but schema ${schema} is not there`,
    );
  }
  const tables = await listTables(source, schema);
  requirePrimaryKeys(schema, tables);
  const version = await schemaVersion(source, schema);
  if (version !== targetVersion(config)) {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `shard ${shard} is at schema version ${version ?? 'unknown'} but the config is at ${targetVersion(config)}; run cluster migrate before moving it`,
    );
  }
  if (await schemaExists(target, schema)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `server ${to} still holds a copy of shard ${shard} (schema ${schema}) left by an earlier move; run shardflake cluster cleanup first`,
    );
  }
  return tables;
}

// ---------------------------------------------------------------------------------------------------- phases

/** planned → prepared: the empty target copy and the source's publication. */
async function prepare(s: Session): Promise<void> {
  const { source, target, record } = s;
  if (await schemaExists(target, record.schema)) {
    // Only this move, killed before recording `prepared`, can have made it: preflight refused any copy there, and
    // before the switch the catalog places the shard on the source. It has no subscription yet, so no data.
    await dropSchema(target, record.schema);
  }
  await createTargetSchema(target, s.config, record.shard, record.schema);
  // The copy in the making is fenced too, so no client can write to it before the switch; the subscription's
  // workers run as replication sessions, for which ordinary triggers do not fire, so the copy still fills.
  await target.query(
    fenceSql(
      record.schema,
      s.tables.map((t) => t.name),
      `shard ${record.shard} is being copied to this server by move #${record.id}; it stays on server ${record.from} until the move switches`,
    ),
  );
  const targetTables = await listTables(target, record.schema);
  const differ = s.tables.filter((t) => targetTables.find((u) => u.name === t.name)?.shape !== t.shape);
  if (differ.length > 0 || targetTables.length !== s.tables.length) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `the tables the config creates differ from shard ${record.shard}'s tables on server ${record.from} (${differ.map((t) => t.name).join(', ') || 'a different set of tables'}); was DDL run outside cluster migrate?`,
    );
  }
  await createPublication(
    source,
    s.names.publication,
    record.schema,
    s.tables.map((t) => t.name),
  );
  await advance(s, 'prepared');
}

/** prepared → subscribed: the subscription starts the copy. */
async function subscribe(s: Session): Promise<void> {
  const oid = await createSubscription(s.target, s.names, s.config.servers[s.record.from] as string);
  await recordSubscriptionOid(s.catalog, s.record.id, oid);
  s.record = { ...s.record, subscriptionOid: oid };
  await advance(s, 'subscribed');
}

/** subscribed → synced: every table copied, and the target caught up with a recent source LSN. */
async function waitSynced(s: Session): Promise<void> {
  const started = performance.now();
  const deadline = started + s.opts.syncTimeoutMs;
  const total = await countRows(s.source, s.record.schema, s.tables);
  let lsn: string | undefined;
  let copiedAt = started;
  for (;;) {
    await checkpoint(s, null);
    const p = await subscriptionProgress(s.target, s.names.subscription, lsn);
    if (p.errors > 0) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the subscription on server ${s.record.to} reported ${p.errors} error(s) while copying; see that server's log`,
      );
    }
    if (p.tables > 0 && p.ready === p.tables) {
      if (lsn === undefined) {
        copiedAt = performance.now();
        s.copiedRows = await countRows(s.target, s.record.schema, s.tables);
        await buildDeferredIndexes(s.source, s.target, s.record.schema);
        lsn = await currentLsn(s.source);
      } else if (p.receivedUpTo) break;
    } else {
      s.opts.onProgress?.({
        shard: s.record.shard,
        moveId: s.record.id,
        phase: 'copying',
        copiedRows: p.copying,
        totalRows: total,
      });
    }
    if (performance.now() > deadline) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the copy of shard ${s.record.shard} did not finish within ${s.opts.syncTimeoutMs} ms`,
      );
    }
    await sleep(s.opts.pollMs * 5);
  }
  s.copyMs = copiedAt - started;
  s.indexMs = performance.now() - copiedAt;
  s.rows = await countRows(s.target, s.record.schema, s.tables);
  await advance(s, 'synced', { rowsCopied: s.rows });
}

/** Polls `check` until it returns true; throws MOVE_FAILED with `what` after `timeoutMs`. */
async function waitUntil(s: Session, check: () => Promise<boolean>, timeoutMs: number, what: string) {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline)
      throw new ShardflakeError('MOVE_FAILED', `${what} within ${timeoutMs} ms`);
    await sleep(s.opts.pollMs / 4);
  }
}

/**
 * synced → fenced: the write pause. Everything from LOCK to COMMIT is one source transaction, so a crash anywhere
 * in it releases the lock and leaves the source the one writable copy, unfenced.
 */
async function cutover(s: Session): Promise<number> {
  const { source, target, record } = s;
  if (await isFenced(source, record.schema)) {
    // A previous run committed the fence (which it did only after verifying and moving the generator).
    return performance.now();
  }
  const tableList = s.tables.map((t) => qualified(record.schema, t.name)).join(', ');
  const names = s.tables.map((t) => t.name);
  const bySnapshots = s.opts.verify === 'snapshots';
  if (bySnapshots) {
    const checked = await verifyOnSnapshots({
      sourceUrl: s.config.servers[record.from] as string,
      targetUrl: s.config.servers[record.to] as string,
      schema: record.schema,
      tables: names,
      lockTimeoutMs: s.opts.lockTimeoutMs,
      timeoutMs: s.opts.cutoverTimeoutMs,
    });
    s.snapshot = { pauseMs: checked.pauseMs, compareMs: checked.compareMs };
  }
  for (let attempt = 1; ; attempt++) {
    const lockAt = performance.now();
    await source.query('BEGIN');
    try {
      await source.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.round(s.opts.lockTimeoutMs))}`);
      await source.query(`LOCK TABLE ${tableList} IN EXCLUSIVE MODE`);
    } catch (error) {
      await source.query('ROLLBACK').catch(() => {});
      const lockTimeout = (error as { code?: string }).code === '55P03';
      if (lockTimeout && attempt < s.opts.cutoverAttempts) continue;
      throw lockTimeout
        ? new ShardflakeError(
            'MOVE_FAILED',
            `could not lock shard ${record.shard}'s tables for cutover: long transactions hold them`,
          )
        : wrapPgError(error);
    }
    const pausedAt = performance.now();
    let mark = pausedAt;
    const step = (name: string) => {
      const now = performance.now();
      s.pauseSteps[name] = Math.round((now - mark) * 10) / 10;
      mark = now;
    };
    s.pauseSteps = { lock: Math.round((pausedAt - lockAt) * 10) / 10 };
    try {
      await checkpoint(s, 'cutover-locked');
      const lsn = await currentLsn(source);
      await waitUntil(
        s,
        async () => (await subscriptionProgress(target, s.names.subscription, lsn)).receivedUpTo,
        s.opts.cutoverTimeoutMs,
        `the target did not catch up with the source's last change`,
      );
      step('catchUp');
      // Compare both copies: the source cannot change now; the target may still be applying the last commit.
      const digest = bySnapshots ? countTables : digestTables;
      const targetDigest = () => inTransaction(target, () => digest(target, record.schema, names));
      const [sourceDigests, firstTarget] = await Promise.all([
        digest(source, record.schema, names),
        targetDigest(),
      ]);
      const deadline = performance.now() + s.opts.cutoverTimeoutMs;
      for (let targetDigests = firstTarget; ; targetDigests = await targetDigest()) {
        const differences = compareDigests(sourceDigests, targetDigests);
        if (differences.length === 0) break;
        if (performance.now() > deadline) throw verificationError(differences);
        await sleep(s.opts.pollMs / 4);
      }
      s.rows = sourceDigests.reduce((n, d) => n + d.rows, 0n);
      step('verify');
      await moveGeneratorState(source, target, record.schema, s.tables);
      await source.query(
        fenceSql(
          record.schema,
          names,
          `shard ${record.shard} has moved from server ${record.from} to server ${record.to} (move #${record.id}); refresh the shard map`,
        ),
      );
      await source.query('COMMIT');
      step('fence');
    } catch (error) {
      await source.query('ROLLBACK').catch(() => {});
      throw error;
    }
    await advance(s, 'fenced');
    step('record');
    return lockAt;
  }
}

function sumSteps(steps: Record<string, number>): number {
  return Object.values(steps).reduce((n, v) => n + v, 0);
}

/** fenced → switched: the catalog names the target; routers learn it by NOTIFY at commit. */
async function switchCatalog(s: Session, pausedAt: number | null): Promise<void> {
  // Both copies are fenced now; open the target just before the catalog points at it.
  if (await isFenced(s.target, s.record.schema)) await s.target.query(unfenceSql(s.record.schema));
  await inTransaction(s.catalog, async () => {
    s.mapVersion = await setShardState(s.catalog, s.record.shard, 'active', s.record.to);
    if (pausedAt !== null) {
      s.pauseMs = performance.now() - pausedAt;
      s.pauseSteps.switch = Math.round((s.pauseMs - sumSteps(s.pauseSteps)) * 10) / 10;
    }
    await recordPhase(s.catalog, s.record.id, 'switched', s.pauseMs === null ? {} : { pauseMs: s.pauseMs });
  });
  s.record = { ...s.record, phase: 'switched' };
  s.opts.onProgress?.({
    shard: s.record.shard,
    moveId: s.record.id,
    phase: 'switched',
    copiedRows: s.rows,
    totalRows: s.rows,
  });
  await checkpoint(s, 'switched');
}

/** switched → done: no replication object may outlive the move. */
async function finish(s: Session): Promise<void> {
  // The fence must exist before the subscription goes (a resumed move re-checks it).
  if (!(await isFenced(s.source, s.record.schema))) {
    await s.source.query(
      fenceSql(
        s.record.schema,
        s.tables.map((t) => t.name),
        `shard ${s.record.shard} has moved from server ${s.record.from} to server ${s.record.to} (move #${s.record.id}); refresh the shard map`,
      ),
    );
  }
  await dropSubscription(s.target, s.names.subscription, true);
  await dropPublication(s.source, s.names.publication);
  await dropSlots(s.source, s.names.slot, s.record.subscriptionOid);
  await advance(s, 'done');
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
    if (await isFenced(source, record.schema)) await source.query(unfenceSql(record.schema));
    await dropPublication(source, names.publication);
    await dropSlots(source, names.slot, record.subscriptionOid);
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
    const s: Session = {
      config,
      opts: { ...DEFAULTS },
      catalog,
      source,
      target,
      record,
      names: replicationNames(record.id),
      tables: await listTables(source, record.schema),
      copyMs: null,
      pauseMs: null,
      pauseSteps: {},
      indexMs: null,
      copiedRows: 0n,
      rows: 0n,
      snapshot: null,
      mapVersion: 0n,
    };
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
    session = {
      config,
      opts,
      catalog,
      source,
      target,
      record,
      names: replicationNames(record.id),
      tables,
      copyMs: null,
      pauseMs: null,
      pauseSteps: {},
      indexMs: null,
      copiedRows: 0n,
      rows: 0n,
      snapshot: null,
      mapVersion: 0n,
    };
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

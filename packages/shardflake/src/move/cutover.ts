import type pg from 'pg';
import { MIGRATIONS_TABLE } from '../admin/shard-ddl.js';
import { recordSwitched } from '../catalog/moves.js';
import { holdOffRestorePoints } from '../catalog/restore-points.js';
import { setShardsState } from '../catalog/shards.js';
import { ShardflakeError } from '../errors/errors.js';
import { fencedSchemas, fencesSql, unfencesSql } from '../fence/fence.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import { settlePreparedOnShards } from '../recovery/settle.js';
import { primaryUrl } from '../topology/connections.js';
import { inTransaction, openServer, sleep } from './connections.js';
import { bypassGuardSql } from './ddl-guard.js';
import { moveGeneratorStates } from './generator.js';
import { openReplicaChecks, type ReplicaChecks, waitFenceOnReplicas } from './replica-fence.js';
import { currentLsn, subscriptionProgress } from './replication.js';
import { advanceAll, checkpoint, type Member, type Run, reportPhase, round } from './run.js';
import { verifyOnSnapshots } from './snapshots.js';
import { compareDigests, digestSchemas, verificationError } from './verify.js';

/**
 * The cutover, group by group (one group is the one shard of a single move, or up to `cutoverGroupShards` shards of
 * a set): the write pause, then the switch. The order is the safety argument:
 *
 * 1. `lock`: LOCK every table of the group IN EXCLUSIVE MODE on the source, in one transaction with a lock_timeout
 *    (retried `cutoverAttempts` times). Reads go on; writes wait.
 * 2. `verify`: the target has received the source's current LSN and both copies hold the same rows (counts and
 *    checksums, or with `snapshots` a barrier: checksums were compared earlier on pinned snapshots).
 * 3. `raise generators`: the target's id generators go above every id the source issued.
 * 4. `fence`: the old copies refuse writes (SF001), in the same transaction.
 * 5. `commit`: the source transaction commits; the phase `fenced` is recorded. Everything from 1 to 5 is one
 *    source transaction, so a crash anywhere in it releases the lock and leaves the source the one writable copy.
 * 6. `switch`: every replica of the source has replayed the fence (bounded wait; past it the move rolls back), the
 *    target copies are opened and one catalog transaction names the target for the group (one map version, one
 *    NOTIFY). Writers that waited on the lock hit the fence; the router refreshes and retries them.
 *
 * Between 5 and 6 both copies refuse writes, so a crash there pauses writes (SF001) until a rerun or `cluster
 * cleanup` finishes (or rolls back) the move.
 */
/**
 * `in-pause` verification of a locked group: the target has received the source's current LSN, then counts and
 * checksums of every table of every shard, one query per side, repeated until equal (the target may still be
 * applying the last commit) or the deadline.
 */
async function verifyInPause(s: Run, toFence: readonly Member[], deadline: number): Promise<void> {
  const lsn = await currentLsn(s.source);
  while (!(await subscriptionProgress(s.target, s.names.subscription, lsn)).receivedUpTo) {
    if (performance.now() > deadline) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the target did not catch up with the source's last change within ${s.opts.cutoverTimeoutMs} ms`,
      );
    }
    await sleep(s.opts.pollMs / 4);
  }
  // Both copies of every shard of the group compared in one query per side; the source cannot change now,
  // the target may still be applying the last commit.
  const entries = toFence.map((m) => ({ schema: m.record.schema, tables: m.tables.map((t) => t.name) }));
  const targetDigests = () => inTransaction(s.target, () => digestSchemas(s.target, entries));
  const [sourceDigests, firstTarget] = await Promise.all([digestSchemas(s.source, entries), targetDigests()]);
  for (let target = firstTarget; ; target = await targetDigests()) {
    const differences = toFence.flatMap((m, k) =>
      compareDigests(sourceDigests[k] ?? [], target[k] ?? []).map((d) => `shard ${m.record.shard}: ${d}`),
    );
    if (differences.length === 0) break;
    if (performance.now() > deadline) throw verificationError(differences);
    await sleep(s.opts.pollMs / 4);
  }
  toFence.forEach((m, k) => {
    m.rows = (sourceDigests[k] ?? []).reduce((n, d) => n + d.rows, 0n);
  });
}

interface Barrier {
  /** A source session of its own, opened before the pause, that writes the barrier. */
  marker: pg.Client;
  schema: string;
  version: number;
  xmin: string | undefined;
}

/** The row a barrier will update (the group's first shard's lowest migration) and its version on the target now. */
async function barrierBefore(s: Run, m: Member): Promise<Barrier> {
  const table = qualified(m.record.schema, MIGRATIONS_TABLE);
  const { rows } = await s.target.query(
    `SELECT version, xmin::text AS x FROM ${table} ORDER BY version LIMIT 1`,
  );
  const row = rows[0] as { version: number; x: string } | undefined;
  if (!row) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `${m.record.schema}.${MIGRATIONS_TABLE} is empty on the target; cannot place a barrier`,
    );
  }
  return {
    marker: await openServer(s.config, s.from, s.opts.pauseBoundMs),
    schema: m.record.schema,
    version: row.version,
    xmin: row.x,
  };
}

/**
 * With `snapshots`, the locked group needs no scan: the checksums were compared on pinned snapshots, and every
 * later change reached the target through the same ordered stream. What must be known is that the target has
 * applied every commit made before the lock: a no-op update of the barrier row, committed by another session now
 * (after everything the lock waited for), becomes visible on the target only after all of those, because the one
 * apply worker applies in commit order.
 */
async function passBarrier(s: Run, barrier: Barrier, deadline: number): Promise<void> {
  const table = qualified(barrier.schema, MIGRATIONS_TABLE);
  await barrier.marker.query(`UPDATE ${table} SET name = name WHERE version = $1`, [barrier.version]);
  for (;;) {
    const { rows } = await s.target.query(`SELECT xmin::text AS x FROM ${table} WHERE version = $1`, [
      barrier.version,
    ]);
    if ((rows[0] as { x: string } | undefined)?.x !== barrier.xmin) return;
    if (performance.now() > deadline) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the target did not apply the cutover barrier within ${s.opts.cutoverTimeoutMs} ms`,
      );
    }
    await sleep(2);
  }
}

/** Groups of shards that share one write pause: consecutive shards up to the group's shard and row limits. */
export function cutoverGroups<T extends { rows: bigint }>(
  members: readonly T[],
  maxShards: number,
  maxRows: number,
): T[][] {
  const groups: T[][] = [];
  let group: T[] = [];
  let rows = 0n;
  for (const m of members) {
    if (group.length > 0 && (group.length >= maxShards || rows + m.rows > BigInt(maxRows))) {
      groups.push(group);
      group = [];
      rows = 0n;
    }
    group.push(m);
    rows += m.rows;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

/** Where the pause's time went: each named step's duration, in ms. */
class PauseClock {
  readonly steps: Record<string, number> = {};
  private mark = performance.now();
  constructor(readonly lockAt: number) {}
  step(name: string): void {
    const now = performance.now();
    this.steps[name] = round(now - this.mark);
    this.mark = now;
  }
}

/** Step 1: BEGIN and LOCK the group's tables on the source (retried on lock_timeout). */
async function lockTables(s: Run, toFence: readonly Member[]): Promise<PauseClock> {
  // With snapshots, each shard's `_shardflake_migrations` stays unlocked (nothing writes it during a move:
  // migrations refuse moving shards) so that a barrier can be written there inside the pause.
  const bySnapshots = s.opts.verify === 'snapshots';
  const tableList = toFence
    .flatMap((m) =>
      m.tables
        .filter((t) => !(bySnapshots && t.name === MIGRATIONS_TABLE))
        .map((t) => qualified(m.record.schema, t.name)),
    )
    .join(', ');
  for (let attempt = 1; ; attempt++) {
    const lockAt = performance.now();
    await s.source.query('BEGIN');
    try {
      await s.source.query(
        `SET LOCAL lock_timeout = ${Math.max(1, Math.round(s.opts.lockTimeoutMs))}; SET LOCAL statement_timeout = ${Math.max(1, Math.round(s.opts.pauseBoundMs))}; ${bypassGuardSql()}`,
      );
      await s.source.query(`LOCK TABLE ${tableList} IN EXCLUSIVE MODE`);
      const clock = new PauseClock(lockAt);
      clock.step('lock');
      return clock;
    } catch (error) {
      await s.source.query('ROLLBACK').catch(() => {});
      const lockTimeout = (error as { code?: string }).code === '55P03';
      if (lockTimeout && attempt < s.opts.cutoverAttempts) continue;
      throw lockTimeout
        ? new ShardflakeError(
            'MOVE_FAILED',
            `could not lock the tables of shard ${toFence.map((m) => m.record.shard).join(', ')} for cutover: long transactions hold them`,
          )
        : wrapPgError(error);
    }
  }
}

/** Step 3: the target's generators above every id the source issued. */
async function raiseGenerators(s: Run, toFence: readonly Member[]): Promise<void> {
  await moveGeneratorStates(
    s.source,
    s.target,
    toFence.map((m) => ({ schema: m.record.schema, tables: m.tables })),
  );
}

export function movedMessage(s: Pick<Run, 'from' | 'to'>, m: Member): string {
  return `shard ${m.record.shard} has moved from server ${s.from} to server ${s.to} (move #${m.record.id}); refresh the shard map`;
}

/** Step 4: the old copies refuse writes (SF001), inside the locked transaction. */
async function fenceOldCopies(s: Run, toFence: readonly Member[]): Promise<void> {
  await s.source.query(
    fencesSql(
      toFence.map((m) => ({
        schema: m.record.schema,
        tables: m.tables.map((t) => t.name),
        message: movedMessage(s, m),
      })),
    ),
  );
}

/** Steps 1–5 for the members not yet fenced: one source transaction from LOCK to COMMIT. */
async function pauseAndFence(s: Run, toFence: Member[]): Promise<number> {
  const barrier = s.opts.verify === 'snapshots' ? await barrierBefore(s, toFence[0] as Member) : null;
  try {
    const clock = await lockTables(s, toFence);
    try {
      await checkpoint(s, 'cutover-locked');
      const deadline = performance.now() + s.opts.cutoverTimeoutMs;
      if (barrier) {
        await passBarrier(s, barrier, deadline);
        clock.step('barrier');
      } else {
        await verifyInPause(s, toFence, deadline);
        clock.step('verify');
      }
      await raiseGenerators(s, toFence);
      await fenceOldCopies(s, toFence);
      await s.source.query('COMMIT');
      clock.step('fence');
    } catch (error) {
      await s.source.query('ROLLBACK').catch(() => {});
      throw error;
    }
    for (const m of toFence) m.pauseSteps = clock.steps;
    return clock.lockAt;
  } finally {
    await barrier?.marker.end().catch(() => {});
  }
}

/** With `snapshots`: checksums on snapshots pinned in a short pause of each shard, before the group's pause. */
async function verifyOnPinnedSnapshots(s: Run, toFence: readonly Member[]): Promise<void> {
  for (const m of toFence) {
    const checked = await verifyOnSnapshots({
      sourceUrl: await primaryUrl(s.config, s.from),
      targetUrl: await primaryUrl(s.config, s.to),
      schema: m.record.schema,
      tables: m.tables.map((t) => t.name),
      lockTimeoutMs: s.opts.lockTimeoutMs,
      timeoutMs: s.opts.cutoverTimeoutMs,
      pauseBoundMs: s.opts.pauseBoundMs,
    });
    m.snapshot = { pauseMs: checked.pauseMs, compareMs: checked.compareMs };
    m.rows = checked.rows;
  }
}

/**
 * Step 6: the fence on every replica of the source (replica-fence.ts), then the target copies opened, then one
 * catalog transaction names the target for the group.
 */
async function switchCatalog(
  s: Run,
  switching: Member[],
  pausedAt: number | null,
  checks: ReplicaChecks,
): Promise<void> {
  const replicas = await waitFenceOnReplicas(s, checks);
  if (replicas.replicas > 0) {
    for (const m of switching) {
      if (Object.keys(m.pauseSteps).length > 0)
        m.pauseSteps = { ...m.pauseSteps, replicas: round(replicas.waitedMs) };
    }
  }
  await s.target.query(unfencesSql(switching.map((m) => m.record.schema)));
  await inTransaction(s.catalog, async () => {
    // A switch is a decision across servers (the fence on the source, the copy on the target, the map here): a
    // restore point holds it off and is never written between its parts (backups/restore-point.ts).
    await holdOffRestorePoints(s.catalog);
    const version = await setShardsState(
      s.catalog,
      switching.map((m) => m.record.shard),
      'active',
      s.to,
    );
    const pauseMs = pausedAt === null ? null : performance.now() - pausedAt;
    for (const m of switching) {
      m.mapVersion = version;
      if (pauseMs !== null && Object.keys(m.pauseSteps).length > 0) {
        m.pauseMs = pauseMs;
        const counted = Object.values(m.pauseSteps).reduce((n, v) => n + v, 0);
        m.pauseSteps = { ...m.pauseSteps, switch: round(pauseMs - counted) };
      }
    }
    await recordSwitched(
      s.catalog,
      switching.map((m) => ({ id: m.record.id, rows: m.rows, pauseMs: m.pauseMs })),
    );
  });
  for (const m of switching) m.record = { ...m.record, phase: 'switched' };
  reportPhase(s, switching, 'switched');
  await checkpoint(s, 'switched');
}

/**
 * Step 0, before any pause: the apply worker streams and has received the source's WAL up to now. A rerun after
 * the source restarted waits here for the worker to reconnect, with writes flowing, instead of inside the pause.
 */
async function streamingBeforePause(s: Run): Promise<void> {
  const lsn = await currentLsn(s.source);
  const deadline = performance.now() + s.opts.syncTimeoutMs;
  while (!(await subscriptionProgress(s.target, s.names.subscription, lsn)).receivedUpTo) {
    if (performance.now() > deadline) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the subscription on server ${s.to} is not streaming from server ${s.from} (waited ${s.opts.syncTimeoutMs} ms)`,
      );
    }
    await sleep(s.opts.pollMs);
  }
}

/** synced → fenced → switched for one group (a resumed group skips what a previous run did). */
export async function cutoverGroup(s: Run, group: Member[]): Promise<void> {
  const already = await fencedSchemas(
    s.source,
    group.map((m) => m.record.schema),
  );
  const toFence = group.filter((m) => m.record.phase === 'synced' && !already.has(m.record.schema));
  let pausedAt: number | null = null;
  const checks = await openReplicaChecks(s);
  try {
    if (toFence.length > 0) {
      // In-doubt prepared transactions hold the tables' locks until settled, by their decision (recovery/settle.ts).
      await settlePreparedOnShards(
        s.config,
        s.from,
        toFence.map((m) => m.record.schema),
        { failWith: 'MOVE_FAILED' },
      );
      await streamingBeforePause(s);
      if (s.opts.verify === 'snapshots') await verifyOnPinnedSnapshots(s, toFence);
      pausedAt = await pauseAndFence(s, toFence);
    }
    const fenced = group.filter((m) => m.record.phase === 'synced');
    if (fenced.length > 0) await advanceAll(s, fenced, 'fenced');
    const switching = group.filter((m) => m.record.phase === 'fenced');
    if (switching.length > 0) await switchCatalog(s, switching, pausedAt, checks);
  } finally {
    await checks.close();
  }
}

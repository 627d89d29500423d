import type pg from 'pg';
import { bumpMapVersion } from '../cluster/catalog.js';
import { type ClusterConfig, targetVersion } from '../cluster/config.js';
import { primaryUrl } from '../cluster/connections.js';
import { fencedSchemas, fenceSql, unfenceSql } from '../cluster/fence.js';
import { MIGRATIONS_TABLE, shardsCreationSql } from '../cluster/shard-ddl.js';
import { lockShard, unlockShard } from '../cluster/shard-lock.js';
import { isShardflakeError, ShardflakeError } from '../errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import { checkThrottle } from './copy-stream.js';
import { bypassGuardSql, ddlPastGuard, guardSchemas, unguardSchemas } from './ddl-guard.js';
import { moveGeneratorStates } from './generator.js';
import {
  DEFAULTS,
  type MoveResult,
  type MoveStep,
  type Options,
  SET_DEFAULTS,
  type SetMoveOptions,
} from './options.js';
import { type MovePhase, reached } from './phases.js';
import {
  createBatch,
  installMoves,
  type MoveRecord,
  recordPhases,
  unfinishedBatch,
  unfinishedMoves,
} from './record.js';
import {
  currentLsn,
  dropPublication,
  dropSlots,
  dropSubscription,
  type ReplicationNames,
  replicationNames,
  subscriptionOid,
  subscriptionProgress,
} from './replication.js';
import { checkReplicationLimits } from './replication-limits.js';
import { inTransaction, kill, MoveInterrupted, openServer, sleep } from './session.js';
import { rollBackMove, settleMove } from './settle.js';
import { copyAtSnapshot, type SnapshotCopyResult } from './snapshot-copy.js';
import { verifyOnSnapshots } from './snapshots.js';
import {
  existingSchemas,
  listTables,
  listTablesOfSchemas,
  requirePrimaryKeys,
  type SourceTable,
} from './tables.js';
import { buildDeferredIndexesOf, deferrableIndexesOf } from './target-schema.js';
import { compareDigests, digestSchemas, verificationError } from './verify.js';

/**
 * Moving a set of shards from one server to another together: the same phases and guarantees as a single move
 * (move.ts), with the expensive parts shared.
 *
 * - One publication (`FOR TABLES IN SCHEMA` every shard of the set), one replication slot and one subscription,
 *   named after the set (`sf_move_<id of its first move>`), so the set costs one WAL sender and one apply worker.
 * - One initial copy of every table of every shard, at one snapshot (snapshot-copy.ts), then one catch-up.
 * - Cutover in groups: shards whose rows together stay under `cutoverGroupRows` share one write pause (one LOCK of
 *   all their tables, one wait for the target to catch up, each shard verified, its generator carried and its old
 *   copy fenced, one COMMIT), and one catalog transaction switches the group (one map version, one NOTIFY).
 * - One finish: subscription, publication and slot dropped once every shard has switched.
 *
 * Every shard keeps its own move record and phase in `shardflake.moves` (with the set's `batch_id`), so a rerun
 * after a crash resumes the set (the shards that switched stay switched; the others continue), and `cluster
 * cleanup` settles each shard as it would a single move. A failure before a shard's switch rolls back every shard
 * of the set that has not switched (they share the stream that failed); the shards that did switch are finished.
 */
interface Member {
  record: MoveRecord;
  tables: SourceTable[];
  resumedFrom: MovePhase | null;
  rows: bigint;
  pauseMs: number | null;
  pauseSteps: Record<string, number>;
  mapVersion: bigint;
  snapshot: { pauseMs: number; compareMs: number } | null;
}

interface SetSession {
  config: ClusterConfig;
  opts: Options & typeof SET_DEFAULTS & SetMoveOptions;
  catalog: pg.Client;
  source: pg.Client;
  target: pg.Client;
  from: string;
  to: string;
  batchId: bigint;
  names: ReplicationNames;
  members: Member[];
  copy: SnapshotCopyResult | null;
  catchUpMs: number | null;
  /** Where the set's time went, ms per step of this run. */
  steps: Record<string, number>;
}

function describe(s: SetSession): string {
  return `set #${s.batchId} (${s.members.length} shards from server ${s.from} to server ${s.to})`;
}

/** The test hook and the abort signal, as in a single move: stop like a killed process, without a word. */
async function checkpoint(s: SetSession, step: MoveStep | null): Promise<void> {
  if (step !== null) await s.opts.afterStep?.(step);
  if ((step !== null && s.opts.stopAfter === step) || s.opts.signal?.aborted) {
    kill(s.source);
    kill(s.target);
    kill(s.catalog);
    throw new MoveInterrupted(
      `${describe(s)} stopped after ${step ?? 'a check'}; run the command again to resume or roll it back`,
    );
  }
}

async function advanceAll(s: SetSession, members: readonly Member[], phase: MovePhase): Promise<void> {
  await recordPhases(
    s.catalog,
    members.map((m) => m.record.id),
    phase,
  );
  for (const m of members) m.record = { ...m.record, phase };
  await checkpoint(s, phase);
}

function pending(s: SetSession, phase: MovePhase): Member[] {
  return s.members.filter((m) => m.record.phase === phase);
}

// ---------------------------------------------------------------------------------------------------- phases

/** planned → prepared: empty, fenced target copies (many per transaction), the set's publication, the DDL guard. */
async function prepare(s: SetSession): Promise<void> {
  const todo = pending(s, 'planned');
  if (todo.length === 0) return;
  const CHUNK = 64;
  for (let i = 0; i < todo.length; i += CHUNK) {
    const chunk = todo.slice(i, i + CHUNK);
    const schemas = chunk.map((m) => m.record.schema);
    await inTransaction(s.target, async () => {
      // Only this set, killed before recording `prepared`, can have made these: preflight refused any copy on
      // the target, and before the switch the catalog places the shard on the source.
      await s.target.query(
        schemas.map((schema) => `DROP SCHEMA IF EXISTS ${quoteIdent(schema, 'schema')} CASCADE`).join(';\n'),
      );
      await s.target.query(
        shardsCreationSql(
          s.config,
          chunk.map((m) => ({ shard: m.record.shard, schema: m.record.schema })),
        ),
      );
      const made = await listTablesOfSchemas(s.target, schemas);
      for (const m of chunk) {
        const tables = made.get(m.record.schema) ?? [];
        const differ = m.tables.filter((t) => tables.find((u) => u.name === t.name)?.shape !== t.shape);
        if (differ.length > 0 || tables.length !== m.tables.length) {
          throw new ShardflakeError(
            'MOVE_FAILED',
            `the tables the config creates differ from shard ${m.record.shard}'s tables on server ${s.from} (${differ.map((t) => t.name).join(', ') || 'a different set of tables'}); was DDL run outside cluster migrate?`,
          );
        }
      }
      const all = chunk.flatMap((m) => m.tables.map((t) => qualified(m.record.schema, t.name)));
      const indexes = await deferrableIndexesOf(s.target, schemas);
      await s.target.query(
        [
          ...(all.length > 0 ? [`TRUNCATE ${all.join(', ')}`] : []),
          ...indexes.map((index) => `DROP INDEX ${qualified(index.schema, index.name)}`),
          ...chunk.map((m) =>
            fenceSql(
              m.record.schema,
              m.tables.map((t) => t.name),
              `shard ${m.record.shard} is being copied to this server by move #${m.record.id}; it stays on server ${s.from} until the move switches`,
            ),
          ),
        ].join(';\n'),
      );
    });
  }
  const { rows } = await s.source.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [
    s.names.publication,
  ]);
  if (rows.length === 0) {
    await s.source.query(
      `CREATE PUBLICATION ${quoteIdent(s.names.publication)} FOR TABLES IN SCHEMA ${s.members
        .map((m) => quoteIdent(m.record.schema, 'schema'))
        .join(', ')}`,
    );
  }
  await guardSchemas(
    s.source,
    s.members.map((m) => m.record.schema),
    s.batchId,
  );
  await advanceAll(s, todo, 'prepared');
}

/**
 * prepared → subscribed: the slot with its snapshot, the copy of every table at that snapshot, the deferred
 * indexes, then the subscription on that slot without a copy of its own. A run killed during the copy left a
 * partial copy and a slot whose snapshot is gone: both are thrown away and the copy starts again.
 */
async function copyAndSubscribe(s: SetSession): Promise<void> {
  const todo = pending(s, 'prepared');
  if (todo.length === 0) return;
  let oid = await subscriptionOid(s.target, s.names.subscription);
  if (oid === null) {
    await dropSlots(s.source, s.names.slot, null);
    await inTransaction(s.target, async () => {
      await s.target.query('SET LOCAL session_replication_role = replica');
      const all = s.members.flatMap((m) => m.tables.map((t) => qualified(m.record.schema, t.name)));
      if (all.length > 0) await s.target.query(`TRUNCATE ${all.join(', ')}`);
    });
    const totalRows = Number(s.members.reduce((n, m) => n + m.rows, 0n));
    s.copy = await copyAtSnapshot({
      sourceUrl: await primaryUrl(s.config, s.from),
      targetUrl: await primaryUrl(s.config, s.to),
      slot: s.names.slot,
      tables: s.members.flatMap((m) => m.tables.map((t) => ({ schema: m.record.schema, table: t.name }))),
      workers: s.opts.copyWorkers,
      throttle: s.opts.throttle,
      stopped: () => s.opts.signal?.aborted === true,
      onProgress: (rows) =>
        s.opts.onSetProgress?.({ from: s.from, to: s.to, phase: 'copying', done: rows, total: totalRows }),
    });
    await checkpoint(s, null);
    for (const m of s.members) {
      m.rows = BigInt(
        m.tables.reduce((n, t) => n + (s.copy?.perTable.get(`${m.record.schema}.${t.name}`) ?? 0), 0),
      );
    }
    await buildDeferredIndexesOf(
      s.source,
      s.target,
      s.members.map((m) => m.record.schema),
    );
    try {
      await s.target.query(
        `CREATE SUBSCRIPTION ${quoteIdent(s.names.subscription)} CONNECTION ${quoteLiteral(await primaryUrl(s.config, s.from))}
         PUBLICATION ${quoteIdent(s.names.publication)}
         WITH (copy_data = false, create_slot = false, slot_name = ${quoteLiteral(s.names.slot)}, enabled = true, streaming = off, binary = true)`,
      );
    } catch (error) {
      throw wrapPgError(error);
    }
    oid = (await subscriptionOid(s.target, s.names.subscription)) as bigint;
  }
  await recordPhases(
    s.catalog,
    todo.map((m) => m.record.id),
    'subscribed',
    { subscriptionOid: oid },
  );
  for (const m of todo) m.record = { ...m.record, phase: 'subscribed', subscriptionOid: oid };
  await checkpoint(s, 'subscribed');
}

/** subscribed → synced: the one apply worker has received the source's WAL up to a recent LSN. */
async function waitSynced(s: SetSession): Promise<void> {
  const todo = pending(s, 'subscribed');
  if (todo.length === 0) return;
  const started = performance.now();
  const lsn = await currentLsn(s.source);
  const deadline = started + s.opts.syncTimeoutMs;
  for (;;) {
    await checkpoint(s, null);
    const p = await subscriptionProgress(s.target, s.names.subscription, lsn);
    if (p.errors > 0) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the subscription of ${describe(s)} reported ${p.errors} error(s); see server ${s.to}'s log`,
      );
    }
    if (p.receivedUpTo) break;
    if (performance.now() > deadline) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `${describe(s)} did not catch up within ${s.opts.syncTimeoutMs} ms`,
      );
    }
    await sleep(s.opts.pollMs);
  }
  s.catchUpMs = performance.now() - started;
  await advanceAll(s, todo, 'synced');
}

/**
 * `in-pause` verification of a locked group: the target has received the source's current LSN, then counts and
 * checksums of every table of every shard, one query per side, repeated until equal (the target may still be
 * applying the last commit) or the deadline.
 */
async function verifyInPause(s: SetSession, toFence: readonly Member[], deadline: number): Promise<void> {
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
async function barrierBefore(s: SetSession, m: Member): Promise<Barrier> {
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
    marker: await openServer(s.config, s.from),
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
async function passBarrier(s: SetSession, barrier: Barrier, deadline: number): Promise<void> {
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

const round = (ms: number) => Math.round(ms * 10) / 10;

/**
 * synced → fenced → switched for one group, in one source transaction (LOCK to COMMIT), as a single move does:
 * a crash anywhere inside releases the lock and leaves the source the one writable copy, unfenced.
 */
async function cutoverGroup(s: SetSession, group: Member[]): Promise<void> {
  const already = await fencedSchemas(
    s.source,
    group.map((m) => m.record.schema),
  );
  const toFence = group.filter((m) => m.record.phase === 'synced' && !already.has(m.record.schema));
  let lockAt = performance.now();
  const bySnapshots = s.opts.verify === 'snapshots';
  if (bySnapshots) {
    // Checksums on snapshots pinned in a short pause of each shard (snapshots.ts: the one apply worker applies in
    // commit order, so the barrier works for a set as for one shard); the group's pause then compares counts.
    for (const m of toFence) {
      const checked = await verifyOnSnapshots({
        sourceUrl: await primaryUrl(s.config, s.from),
        targetUrl: await primaryUrl(s.config, s.to),
        schema: m.record.schema,
        tables: m.tables.map((t) => t.name),
        lockTimeoutMs: s.opts.lockTimeoutMs,
        timeoutMs: s.opts.cutoverTimeoutMs,
      });
      m.snapshot = { pauseMs: checked.pauseMs, compareMs: checked.compareMs };
      m.rows = checked.rows;
    }
  }
  if (toFence.length > 0) {
    // With snapshots, each shard's `_shardflake_migrations` stays unlocked (nothing writes it during a move:
    // migrations refuse moving shards) so that a barrier can be written there inside the pause.
    const tableList = toFence
      .flatMap((m) =>
        m.tables
          .filter((t) => !(bySnapshots && t.name === MIGRATIONS_TABLE))
          .map((t) => qualified(m.record.schema, t.name)),
      )
      .join(', ');
    const barrier = bySnapshots ? await barrierBefore(s, toFence[0] as Member) : null;
    try {
      for (let attempt = 1; ; attempt++) {
        lockAt = performance.now();
        await s.source.query('BEGIN');
        try {
          await s.source.query(
            `SET LOCAL lock_timeout = ${Math.max(1, Math.round(s.opts.lockTimeoutMs))}; ${bypassGuardSql()}`,
          );
          await s.source.query(`LOCK TABLE ${tableList} IN EXCLUSIVE MODE`);
          break;
        } catch (error) {
          await s.source.query('ROLLBACK').catch(() => {});
          const lockTimeout = (error as { code?: string }).code === '55P03';
          if (lockTimeout && attempt < s.opts.cutoverAttempts) continue;
          throw lockTimeout
            ? new ShardflakeError(
                'MOVE_FAILED',
                `could not lock the tables of shards ${toFence.map((m) => m.record.shard).join(', ')} for cutover: long transactions hold them`,
              )
            : wrapPgError(error);
        }
      }
      const steps: Record<string, number> = { lock: round(performance.now() - lockAt) };
      let mark = performance.now();
      const step = (name: string) => {
        const now = performance.now();
        steps[name] = round(now - mark);
        mark = now;
      };
      try {
        await checkpoint(s, 'cutover-locked');
        const deadline = performance.now() + s.opts.cutoverTimeoutMs;
        if (barrier) {
          await passBarrier(s, barrier, deadline);
          step('barrier');
        } else {
          await verifyInPause(s, toFence, deadline);
          step('verify');
        }
        await moveGeneratorStates(
          s.source,
          s.target,
          toFence.map((m) => ({ schema: m.record.schema, tables: m.tables })),
        );
        await s.source.query(
          toFence
            .map((m) =>
              fenceSql(
                m.record.schema,
                m.tables.map((t) => t.name),
                `shard ${m.record.shard} has moved from server ${s.from} to server ${s.to} (move #${m.record.id}); refresh the shard map`,
              ),
            )
            .join(';\n'),
        );
        await s.source.query('COMMIT');
        step('fence');
      } catch (error) {
        await s.source.query('ROLLBACK').catch(() => {});
        throw error;
      }
      for (const m of toFence) m.pauseSteps = steps;
    } finally {
      await barrier?.marker.end().catch(() => {});
    }
  }
  const fenced = group.filter((m) => m.record.phase === 'synced');
  if (fenced.length > 0) await advanceAll(s, fenced, 'fenced');

  // fenced → switched: open the target copies, then one catalog transaction names the target for the group.
  const switching = group.filter((m) => m.record.phase === 'fenced');
  if (switching.length === 0) return;
  await s.target.query(switching.map((m) => unfenceSql(m.record.schema)).join(';\n'));
  await inTransaction(s.catalog, async () => {
    const version = await bumpMapVersion(s.catalog);
    await s.catalog.query(
      `UPDATE shardflake.shards SET state = 'active', server = $2, changed_in_version = $3 WHERE shard = ANY($1::int[])`,
      [switching.map((m) => m.record.shard), s.to, version],
    );
    const pauseMs = toFence.length > 0 ? performance.now() - lockAt : null;
    for (const m of switching) {
      m.mapVersion = version;
      if (pauseMs !== null && toFence.includes(m)) m.pauseMs = pauseMs;
    }
    await s.catalog.query(
      `UPDATE shardflake.moves AS m SET phase = 'switched', updated_at = now(), rows_copied = x.rows,
              pause_ms = coalesce(x.pause, m.pause_ms)
         FROM unnest($1::bigint[], $2::bigint[], $3::float8[]) AS x(id, rows, pause)
        WHERE m.id = x.id`,
      [
        switching.map((m) => String(m.record.id)),
        switching.map((m) => String(m.rows)),
        switching.map((m) => m.pauseMs),
      ],
    );
  });
  for (const m of switching) m.record = { ...m.record, phase: 'switched' };
  await checkpoint(s, 'switched');
}

/** switched → done for every shard: the fences checked, then the set's subscription, publication and slot dropped. */
async function finishSet(s: SetSession, members: readonly Member[]): Promise<void> {
  const todo = members.filter((m) => m.record.phase === 'switched');
  if (todo.length === 0) return;
  const fenced = await fencedSchemas(
    s.source,
    todo.map((m) => m.record.schema),
  );
  for (const m of todo) {
    if (!fenced.has(m.record.schema)) {
      await ddlPastGuard(
        s.source,
        fenceSql(
          m.record.schema,
          m.tables.map((t) => t.name),
          `shard ${m.record.shard} has moved from server ${s.from} to server ${s.to} (move #${m.record.id}); refresh the shard map`,
        ),
      );
    }
  }
  await dropSubscription(s.target, s.names.subscription, true);
  await dropPublication(s.source, s.names.publication);
  await dropSlots(s.source, s.names.slot, todo[0]?.record.subscriptionOid ?? null);
  await unguardSchemas(
    s.source,
    todo.map((m) => m.record.schema),
  );
  await advanceAll(s, todo, 'done');
}

async function timed(s: SetSession, name: string, work: () => Promise<void>): Promise<void> {
  const t = performance.now();
  try {
    await work();
  } finally {
    s.steps[name] = round((s.steps[name] ?? 0) + performance.now() - t);
  }
}

async function drive(s: SetSession): Promise<void> {
  await timed(s, 'prepare', () => prepare(s));
  await timed(s, 'copy', () => copyAndSubscribe(s));
  await timed(s, 'catchUp', () => waitSynced(s));
  const cutting = s.members.filter((m) => m.record.phase === 'synced' || m.record.phase === 'fenced');
  const groups = cutoverGroups(cutting, s.opts.cutoverGroupShards, s.opts.cutoverGroupRows);
  let switched = s.members.filter((m) => reached(m.record.phase, 'switched')).length;
  for (const group of groups) {
    await timed(s, 'cutover', () => cutoverGroup(s, group));
    switched += group.length;
    s.opts.onSetProgress?.({
      from: s.from,
      to: s.to,
      phase: 'switching',
      done: switched,
      total: s.members.length,
    });
  }
  await timed(s, 'finish', () => finishSet(s, s.members));
}

// ---------------------------------------------------------------------------------------------------- entry

function result(s: SetSession, m: Member): MoveResult {
  const copyMs = s.copy?.ms ?? null;
  return {
    moveId: m.record.id,
    shard: m.record.shard,
    schema: m.record.schema,
    from: s.from,
    to: s.to,
    resumedFrom: m.resumedFrom,
    rows: m.rows,
    tables: m.tables.length,
    copyMs,
    indexAndCatchUpMs: s.catchUpMs,
    rowsPerSecond: s.copy && copyMs ? Math.round((s.copy.rows * 1000) / copyMs) : null,
    pauseMs: m.pauseMs,
    pauseSteps: m.pauseSteps,
    verify: s.opts.verify,
    snapshotPauseMs: m.snapshot?.pauseMs ?? null,
    snapshotCompareMs: m.snapshot?.compareMs ?? null,
    mapVersion: m.mapVersion,
    batchId: s.batchId,
    setSteps: s.steps,
  };
}

/**
 * Runs one set (fresh or resumed) whose shards this process has locked. On failure, rolls back the shards that
 * have not switched and finishes those that have.
 */
async function runSet(
  config: ClusterConfig,
  opts: SetSession['opts'],
  records: MoveRecord[],
  tablesOf: Map<number, SourceTable[]>,
  resumed: boolean,
): Promise<MoveResult[]> {
  const first = records[0] as MoveRecord;
  const batchId = first.batchId ?? first.id;
  // A connection of its own for the set's catalog transactions: sets may run side by side, and the shard locks
  // stay on the caller's connection.
  const catalog = await openServer(config, config.catalog);
  const source = await openServer(config, first.from).catch(async (error) => {
    await catalog.end().catch(() => {});
    throw error;
  });
  const target = await openServer(config, first.to).catch(async (error) => {
    await Promise.all([source.end().catch(() => {}), catalog.end().catch(() => {})]);
    throw error;
  });
  const s: SetSession = {
    config,
    opts,
    catalog,
    source,
    target,
    from: first.from,
    to: first.to,
    batchId,
    names: replicationNames(batchId),
    members: [],
    copy: null,
    catchUpMs: null,
    steps: {},
  };
  try {
    // Rows per shard, estimated until the copy counts them: they size the cutover groups.
    const { rows: estimates } = await source.query(
      'SELECT schemaname AS schema, sum(n_live_tup)::bigint AS n FROM pg_stat_user_tables WHERE schemaname = ANY($1::text[]) GROUP BY 1',
      [records.map((r) => r.schema)],
    );
    const estimated = new Map(
      (estimates as { schema: string; n: bigint }[]).map((r) => [r.schema, BigInt(r.n)]),
    );
    for (const record of records) {
      const tables = tablesOf.get(record.shard) ?? (await listTables(source, record.schema));
      s.members.push({
        record,
        tables,
        resumedFrom: resumed ? record.phase : null,
        rows: estimated.get(record.schema) ?? 0n,
        pauseMs: null,
        pauseSteps: {},
        mapVersion: 0n,
        snapshot: null,
      });
    }
    if (!resumed) await checkpoint(s, 'planned');
    try {
      await drive(s);
    } catch (error) {
      if (error instanceof MoveInterrupted) throw error;
      const reason = isShardflakeError(error) ? error.message : wrapPgError(error).message;
      const back = s.members.filter(
        (m) => !reached(m.record.phase, 'switched') && m.record.phase !== 'rolled_back',
      );
      const problems: string[] = [];
      for (const m of back) {
        await rollBackMove(config, catalog, m.record, reason).catch((e: unknown) =>
          problems.push(`shard ${m.record.shard}: ${(e as Error).message}`),
        );
      }
      const forward = s.members.filter((m) => m.record.phase === 'switched');
      if (forward.length > 0) {
        await finishSet(s, forward).catch((e: unknown) => problems.push((e as Error).message));
      }
      const shards = (list: Member[]) => list.map((m) => m.record.shard).join(', ');
      throw new ShardflakeError(
        'MOVE_FAILED',
        `moving shards ${shards(s.members)} to server ${s.to} failed: ${reason}; ${
          back.length > 0 ? `shards ${shards(back)} were rolled back and stay on server ${s.from}` : ''
        }${forward.length > 0 ? `${back.length > 0 ? '; ' : ''}shards ${shards(forward)} had switched and now live on server ${s.to}` : ''}${
          problems.length > 0
            ? ` (not yet undone: ${problems.join('; ')}; run the command again or shardflake cluster cleanup)`
            : ''
        }`,
        { cause: error },
      );
    }
    return s.members.map((m) => result(s, m));
  } finally {
    await Promise.all([source, target, catalog].map((c) => c.end().catch(() => {})));
  }
}

function owner(opts: SetMoveOptions): string {
  return opts.owner ?? `${process.env.HOSTNAME ?? 'localhost'}:${process.pid}`;
}

/** The catalog's placement of each shard, in one query. */
async function readPlacements(
  catalog: pg.Client,
  shards: readonly number[],
): Promise<Map<number, { server: string; schema: string }>> {
  const { rows } = await catalog.query(
    'SELECT shard, server, schema_name FROM shardflake.shards WHERE shard = ANY($1::int[])',
    [shards],
  );
  const found = new Map(
    (rows as { shard: number; server: string; schema_name: string }[]).map((r) => [
      r.shard,
      { server: r.server, schema: r.schema_name },
    ]),
  );
  const missing = shards.filter((n) => !found.has(n));
  if (missing.length > 0) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      `shard ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not in the shard map; run cluster init first`,
    );
  }
  return found;
}

/**
 * The checks of a single move's preflight (steps.ts), for a whole set in a few queries: logical WAL on the source,
 * every schema there with primary keys on every table and at the config's schema version, none on the target yet.
 * (Replication slots and workers are checked for the whole plan by checkReplicationLimits.)
 */
async function preflightSet(
  config: ClusterConfig,
  shards: readonly { shard: number; schema: string }[],
  from: string,
  to: string,
  source: pg.Client,
  target: pg.Client,
): Promise<Map<number, SourceTable[]>> {
  const wal = (await source.query('SHOW wal_level')).rows[0] as { wal_level: string };
  if (wal.wal_level !== 'logical') {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `server ${from} runs with wal_level=${wal.wal_level}; shard moves need wal_level=logical`,
    );
  }
  const schemas = shards.map((s) => s.schema);
  const present = await existingSchemas(source, schemas);
  const absent = shards.filter((s) => !present.has(s.schema));
  if (absent.length > 0) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `the catalog places shard ${absent.map((s) => s.shard).join(', ')} on server ${from}, but schema ${absent.map((s) => s.schema).join(', ')} is not there`,
    );
  }
  const tables = await listTablesOfSchemas(source, schemas);
  for (const { schema } of shards) requirePrimaryKeys(schema, tables.get(schema) ?? []);
  const { rows } = await source.query(
    shards
      .map(
        (s, i) =>
          `SELECT ${i} AS i, (SELECT max(version)::int FROM ${qualified(s.schema, MIGRATIONS_TABLE)}) AS v`,
      )
      .join(' UNION ALL '),
  );
  const wanted = targetVersion(config);
  for (const r of rows as { i: number; v: number | null }[]) {
    if (r.v !== wanted) {
      throw new ShardflakeError(
        'NOT_SUPPORTED',
        `shard ${shards[r.i]?.shard} is at schema version ${r.v ?? 'unknown'} but the config is at ${wanted}; run cluster migrate before moving it`,
      );
    }
  }
  const left = await existingSchemas(target, schemas);
  if (left.size > 0) {
    const on = shards.filter((s) => left.has(s.schema)).map((s) => s.shard);
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `server ${to} still holds a copy of shard ${on.join(', ')} left by an earlier move; run shardflake cluster cleanup first`,
    );
  }
  return new Map(shards.map((s) => [s.shard, tables.get(s.schema) ?? []]));
}

/** Refuses a list of moves with duplicates, unknown shards, unknown targets or a bad throttle, before anything starts. */
export function checkMoveList(
  config: ClusterConfig,
  moves: readonly { shard: number; to: string }[],
  options: SetMoveOptions = {},
): void {
  if (moves.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'no shard to move: the shard list is empty');
  const seen = new Set<number>();
  const twice: number[] = [];
  for (const { shard } of moves) {
    if (seen.has(shard)) twice.push(shard);
    seen.add(shard);
  }
  if (twice.length > 0) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `the shard list names shard ${[...new Set(twice)].join(', ')} more than once`,
    );
  }
  const unknown = moves
    .map((m) => m.shard)
    .filter((n) => !Number.isInteger(n) || n < 0 || n >= config.logicalShards);
  if (unknown.length > 0) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      `${unknown.length === 1 ? 'shard' : 'shards'} ${unknown.join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not among the cluster's ${config.logicalShards} logical shards (0–${config.logicalShards - 1})`,
    );
  }
  for (const to of new Set(moves.map((m) => m.to))) {
    if (!(to in config.servers)) {
      throw new ShardflakeError(
        'UNKNOWN_SERVER',
        `server ${JSON.stringify(to)} is not in the config (servers: ${Object.keys(config.servers).join(', ')})`,
      );
    }
  }
  checkSetOptions(options);
}

/** Refuses a throttle of 0 or less and worker or group counts below 1, before anything starts. */
export function checkSetOptions(options: SetMoveOptions): void {
  checkThrottle(options.throttle);
  for (const [name, value] of [
    ['copyWorkers', options.copyWorkers],
    ['streamsPerServer', options.streamsPerServer],
    ['cutoverGroupShards', options.cutoverGroupShards],
  ] as const) {
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `${name} must be a whole number of at least 1, not ${value}`,
      );
    }
  }
}

/** Refuses a list of shards for one target (see checkMoveList). */
export function checkShardList(config: ClusterConfig, shards: readonly number[], to: string): void {
  checkMoveList(
    config,
    shards.map((shard) => ({ shard, to })),
  );
}

/**
 * Moves `shards` to server `to` as sets (one per source server), or resumes the interrupted sets they belong to.
 * Returns one result per shard, in the order given.
 */
export async function moveShardSet(
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

interface PlannedSet {
  from: string;
  to: string;
  records: MoveRecord[];
  tables: Map<number, SourceTable[]>;
  resumed: boolean;
}

/**
 * Runs sets side by side, at most `streamsPerServer` replication streams on any server at a time (a set is one
 * stream on its source and one on its target); a set starts as soon as both its servers have room.
 */
async function runSideBySide(
  config: ClusterConfig,
  opts: SetSession['opts'],
  sets: readonly PlannedSet[],
): Promise<{ results: MoveResult[]; errors: unknown[] }> {
  const busy = new Map<string, number>();
  const room = (server: string) => (busy.get(server) ?? 0) < opts.streamsPerServer;
  const waiting = [...sets];
  const running = new Set<Promise<void>>();
  const results: MoveResult[] = [];
  const errors: unknown[] = [];
  while (waiting.length > 0 || running.size > 0) {
    const i = waiting.findIndex((set) => room(set.from) && room(set.to));
    if (i !== -1 && errors.length === 0) {
      const set = waiting.splice(i, 1)[0] as PlannedSet;
      busy.set(set.from, (busy.get(set.from) ?? 0) + 1);
      busy.set(set.to, (busy.get(set.to) ?? 0) + 1);
      const run: Promise<void> = runSet(config, opts, set.records, set.tables, set.resumed)
        .then(
          (r) => {
            results.push(...r);
          },
          (e: unknown) => {
            errors.push(e);
          },
        )
        .finally(() => {
          busy.set(set.from, (busy.get(set.from) ?? 1) - 1);
          busy.set(set.to, (busy.get(set.to) ?? 1) - 1);
          running.delete(run);
        });
      running.add(run);
      continue;
    }
    if (running.size === 0) break; // an error stopped new sets from starting
    await Promise.race(running);
  }
  return { results, errors };
}

/**
 * Moves each listed shard to its target: shards from the same source to the same target move as one set, and sets
 * of distinct server pairs run side by side (`streamsPerServer`). Interrupted sets among them are resumed whole.
 * Returns one result per listed shard, in the order given.
 */
export async function moveSets(
  config: ClusterConfig,
  moves: readonly { shard: number; to: string }[],
  options: SetMoveOptions = {},
): Promise<MoveResult[]> {
  checkMoveList(config, moves, options);
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
  const opts = { ...DEFAULTS, ...SET_DEFAULTS, ...given } as SetSession['opts'];
  const targetOf = new Map(moves.map((m) => [m.shard, m.to]));
  const shards = moves.map((m) => m.shard);
  const catalog = await openServer(config, config.catalog);
  const locked: number[] = [];
  const lock = async (shard: number) => {
    if (locked.includes(shard)) return;
    await lockShard(catalog, shard);
    locked.push(shard);
  };
  try {
    await installMoves(catalog);
    for (const shard of [...shards].sort((a, b) => a - b)) await lock(shard);

    // Unfinished moves of these shards: sets towards the same target are resumed whole (every shard of the set,
    // listed or not); anything else is settled first (finished if it switched, rolled back if not).
    const resumedSets = new Map<bigint, MoveRecord[]>();
    for (const record of await unfinishedMoves(catalog, shards)) {
      if (record.batchId !== null && record.to === targetOf.get(record.shard)) {
        if (resumedSets.has(record.batchId)) continue;
        const members = await unfinishedBatch(catalog, record.batchId);
        for (const m of members) await lock(m.shard);
        resumedSets.set(record.batchId, members);
      } else {
        const members = record.batchId !== null ? await unfinishedBatch(catalog, record.batchId) : [record];
        for (const m of members) {
          await lock(m.shard);
          await settleMove(
            config,
            catalog,
            m,
            `superseded by a move to server ${targetOf.get(record.shard)}`,
          );
        }
      }
    }
    const resumedShards = new Set([...resumedSets.values()].flat().map((m) => m.shard));
    const fresh = shards.filter((n) => !resumedShards.has(n));
    const placements = await readPlacements(catalog, fresh);
    const there = fresh.filter((n) => placements.get(n)?.server === targetOf.get(n));
    if (there.length > 0) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        there.length === 1
          ? `server ${targetOf.get(there[0] as number)} already holds shard ${there[0]}; nothing was moved (leave it out of the list)`
          : `shards ${there.join(', ')} are already on their target server; nothing was moved (leave them out of the list)`,
      );
    }

    // Fresh sets, one per (source, target) pair: every shard checked, and the servers' replication limits, before
    // any is recorded.
    const byPair = new Map<string, { from: string; to: string; shards: number[] }>();
    for (const shard of fresh) {
      const from = (placements.get(shard) as { server: string }).server;
      const to = targetOf.get(shard) as string;
      const key = JSON.stringify([from, to]);
      const pair = byPair.get(key) ?? { from, to, shards: [] };
      pair.shards.push(shard);
      byPair.set(key, pair);
    }
    const sets: PlannedSet[] = [...resumedSets.values()].map((records) => ({
      from: (records[0] as MoveRecord).from,
      to: (records[0] as MoveRecord).to,
      records,
      tables: new Map(),
      resumed: true,
    }));
    const checked: {
      pair: { from: string; to: string; shards: number[] };
      tables: Map<number, SourceTable[]>;
    }[] = [];
    const checkStarted = performance.now();
    for (const pair of byPair.values()) {
      const source = await openServer(config, pair.from);
      const target = await openServer(config, pair.to).catch(async (e) => {
        await source.end().catch(() => {});
        throw e;
      });
      let tables: Map<number, SourceTable[]>;
      try {
        tables = await preflightSet(
          config,
          pair.shards.map((shard) => ({
            shard,
            schema: (placements.get(shard) as { schema: string }).schema,
          })),
          pair.from,
          pair.to,
          source,
          target,
        );
      } finally {
        await Promise.all([source.end().catch(() => {}), target.end().catch(() => {})]);
      }
      checked.push({ pair, tables });
    }
    await checkReplicationLimits(
      config,
      [...sets.map((s) => ({ from: s.from, to: s.to })), ...checked.map((c) => c.pair)],
      opts.streamsPerServer,
    );
    for (const { pair, tables } of checked) {
      const records = await inTransaction(catalog, async () => {
        const made = await createBatch(
          catalog,
          pair.shards.map((shard) => ({
            shard,
            schema: (placements.get(shard) as { schema: string }).schema,
            from: pair.from,
            to: pair.to,
          })),
          owner(opts),
        );
        const version = await bumpMapVersion(catalog);
        await catalog.query(
          `UPDATE shardflake.shards SET state = 'moving', changed_in_version = $2 WHERE shard = ANY($1::int[])`,
          [pair.shards, version],
        );
        return made;
      });
      sets.push({ from: pair.from, to: pair.to, records, tables, resumed: false });
    }

    const checkMs = round(performance.now() - checkStarted);
    const { results, errors } = await runSideBySide(config, opts, sets);
    for (const r of results) if (r.setSteps) r.setSteps.check = checkMs;
    if (errors.length > 0) {
      const first = errors[0];
      if (errors.length === 1 || first instanceof MoveInterrupted) throw first;
      throw new ShardflakeError(
        'MOVE_FAILED',
        `${errors.length} sets failed: ${errors.map((e) => (e as Error).message).join(' | ')}`,
        { cause: first },
      );
    }
    const byShard = new Map(results.map((r) => [r.shard, r]));
    return shards.map((n) => byShard.get(n)).filter((r): r is MoveResult => r !== undefined);
  } catch (error) {
    throw isShardflakeError(error) ? error : wrapPgError(error);
  } finally {
    for (const shard of locked) await unlockShard(catalog, shard).catch(() => {});
    await catalog.end().catch(() => {});
  }
}

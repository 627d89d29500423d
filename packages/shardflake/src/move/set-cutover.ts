import type pg from 'pg';
import { bumpMapVersion } from '../cluster/catalog.js';
import { primaryUrl } from '../cluster/connections.js';
import { fencedSchemas, fenceSql, unfenceSql } from '../cluster/fence.js';
import { MIGRATIONS_TABLE } from '../cluster/shard-ddl.js';
import { settlePreparedOnShards } from '../cluster/transactions/settle.js';
import { ShardflakeError } from '../errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import { bypassGuardSql } from './ddl-guard.js';
import { moveGeneratorStates } from './generator.js';
import { currentLsn, subscriptionProgress } from './replication.js';
import { inTransaction, openServer, sleep } from './session.js';
import { advanceAll, checkpoint, type Member, type SetSession } from './set-session.js';
import { verifyOnSnapshots } from './snapshots.js';
import { compareDigests, digestSchemas, verificationError } from './verify.js';

/**
 * The cutover of a set, group by group: the write pause (one source transaction from LOCK to COMMIT, so a crash
 * anywhere inside releases the lock and leaves the source the one writable copy, unfenced), then the switch.
 */
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

export const round = (ms: number) => Math.round(ms * 10) / 10;

/**
 * synced → fenced → switched for one group, in one source transaction (LOCK to COMMIT), as a single move does:
 * a crash anywhere inside releases the lock and leaves the source the one writable copy, unfenced.
 */
export async function cutoverGroup(s: SetSession, group: Member[]): Promise<void> {
  const already = await fencedSchemas(
    s.source,
    group.map((m) => m.record.schema),
  );
  const toFence = group.filter((m) => m.record.phase === 'synced' && !already.has(m.record.schema));
  let lockAt = performance.now();
  const bySnapshots = s.opts.verify === 'snapshots';
  // In-doubt prepared transactions hold the tables' locks until settled, by their decision (transactions/settle.ts).
  await settlePreparedOnShards(
    s.config,
    s.from,
    toFence.map((m) => m.record.schema),
    { failWith: 'MOVE_FAILED' },
  );
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

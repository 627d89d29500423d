import type pg from 'pg';
import { MIGRATIONS_TABLE } from '../admin/shard-ddl.js';
import { ShardflakeError } from '../errors/errors.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { qualified, quoteLiteral } from '../postgres/identifier.js';
import { compareDigests, digestTables, verificationError } from './verify.js';

/**
 * Verification on consistent snapshots, outside the write pause (`verify: 'snapshots'`), for shards whose full
 * comparison would make the cutover pause too long. The idea is VDiff's (Vitess): pause writes only long enough
 * to pin the same state on both servers, then compare at leisure.
 *
 * 1. Source: a REPEATABLE READ transaction locks the shard's tables IN EXCLUSIVE MODE (writes wait) and exports
 *    its snapshot; a second session imports it, so the snapshot outlives the lock.
 * 2. Barrier: a third session makes a no-op UPDATE of one `_shardflake_migrations` row (that table is not locked;
 *    migrations are refused during a move, so nothing else writes it). It commits after every write the lock
 *    waited for, and the target applies transactions in commit order, so once the target shows the row's new
 *    version (its xmin changes), the target holds exactly the source's locked state. A REPEATABLE READ
 *    transaction on the target pins it.
 * 3. The source lock is released (the pause ends, typically 10–40 ms), and both pinned snapshots are digested
 *    and compared while writes go on.
 *
 * The final cutover then compares row counts only, after the same catch-up as always: the rows were proven equal
 * here, and every later change reached the target through the same replication stream that was just verified.
 */
export interface SnapshotVerifyOptions {
  sourceUrl: string;
  targetUrl: string;
  schema: string;
  tables: readonly string[];
  lockTimeoutMs: number;
  timeoutMs: number;
  /** Bound on how long a frozen caller can keep the short pause (idle_in_transaction_session_timeout). */
  pauseBoundMs?: number;
}

export interface SnapshotVerifyResult {
  rows: bigint;
  pauseMs: number;
  compareMs: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function verifyOnSnapshots(o: SnapshotVerifyOptions): Promise<SnapshotVerifyResult> {
  const open = (url: string) => connect(url, { applicationName: 'shardflake move verify' });
  const sessions: pg.Client[] = [];
  try {
    const [locker, pinnedSource, marker, pinnedTarget] = await Promise.all([
      open(o.sourceUrl),
      open(o.sourceUrl),
      open(o.sourceUrl),
      open(o.targetUrl),
    ]);
    sessions.push(locker, pinnedSource, marker, pinnedTarget);
    // The session that pauses writes ends itself if this process freezes inside the pause (see boundedSessionSql).
    if (o.pauseBoundMs !== undefined) {
      await locker.query(
        `SET idle_in_transaction_session_timeout = ${Math.max(1, Math.round(o.pauseBoundMs))}`,
      );
    }
    const migrations = qualified(o.schema, MIGRATIONS_TABLE);
    const locked = o.tables.filter((t) => t !== MIGRATIONS_TABLE).map((t) => qualified(o.schema, t));
    const { rows: versionRows } = await pinnedTarget.query(`SELECT min(version) AS v FROM ${migrations}`);
    const version = (versionRows[0] as { v: number | null }).v;
    if (version === null) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `${o.schema}.${MIGRATIONS_TABLE} is empty on the target; cannot place a barrier`,
      );
    }
    const markerXmin = async () =>
      (
        (await pinnedTarget.query(`SELECT xmin::text AS x FROM ${migrations} WHERE version = $1`, [version]))
          .rows[0] as { x: string } | undefined
      )?.x;
    const before = await markerXmin();

    const pausedAt = performance.now();
    await locker.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    let pauseMs: number;
    try {
      await locker.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.round(o.lockTimeoutMs))}`);
      if (locked.length > 0) await locker.query(`LOCK TABLE ${locked.join(', ')} IN EXCLUSIVE MODE`);
      // The first query takes the snapshot, after the lock: it sees every write that was waited for.
      const { rows } = await locker.query('SELECT pg_export_snapshot() AS snapshot');
      await pinnedSource.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await pinnedSource.query(
        `SET TRANSACTION SNAPSHOT ${quoteLiteral((rows[0] as { snapshot: string }).snapshot)}`,
      );
      await marker.query(`UPDATE ${migrations} SET name = name WHERE version = $1`, [version]);
      const deadline = performance.now() + o.timeoutMs;
      while ((await markerXmin()) === before) {
        if (performance.now() > deadline) {
          throw new ShardflakeError(
            'MOVE_FAILED',
            `the target did not apply the verification barrier within ${o.timeoutMs} ms`,
          );
        }
        await sleep(2);
      }
      await pinnedTarget.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await pinnedTarget.query('SELECT 1');
      await locker.query('COMMIT');
      pauseMs = performance.now() - pausedAt;
    } catch (error) {
      await locker.query('ROLLBACK').catch(() => {});
      throw error;
    }

    const compareAt = performance.now();
    const [sourceDigests, targetDigests] = await Promise.all([
      digestTables(pinnedSource, o.schema, o.tables),
      digestTables(pinnedTarget, o.schema, o.tables),
    ]);
    const differences = compareDigests(sourceDigests, targetDigests);
    if (differences.length > 0) throw verificationError(differences);
    return {
      rows: sourceDigests.reduce((n, d) => n + d.rows, 0n),
      pauseMs,
      compareMs: performance.now() - compareAt,
    };
  } catch (error) {
    throw error instanceof ShardflakeError ? error : wrapPgError(error);
  } finally {
    await Promise.all(sessions.map((c) => c.end().catch(() => {})));
  }
}

import type pg from 'pg';
import { setAdoptionPhase } from '../catalog/adopt.js';
import { setShardsState } from '../catalog/shards.js';
import { ShardflakeError } from '../errors/errors.js';
import { fenceSql } from '../fence/fence.js';
import { boundedSessionSql } from '../move/connections.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { qualified, quoteLiteral } from '../postgres/identifier.js';
import type { Stream } from './stream.js';
import { compareCopies } from './verify.js';

/**
 * The cutover. The order is the safety argument:
 *
 * 1. Verify on pinned moments, outside the write pause (the idea of Vitess's VDiff): a short pause locks the
 *    source's adopted tables IN EXCLUSIVE MODE (writes wait, reads go on), takes the source's LSN and exports a
 *    snapshot that a second session imports, and ends. The stream then applies exactly what committed before that
 *    LSN, and one REPEATABLE READ transaction per server pins that state. Both sides now show the same moment:
 *    every table is compared shard by shard (verify.ts) while writes go on. A difference stops here, nothing fenced.
 * 2. The write pause: the tables locked again; the stream drains to the source's LSN now (everything committed
 *    before the lock); the fence goes on (SF001 on every write, as on a moved shard's old copy); commit. The
 *    locking session ends itself past the pause bound (idle_in_transaction_session_timeout), so a frozen or killed
 *    run releases the source's writers, still unfenced (the fence commits with the lock or not at all).
 * 3. The switch: one catalog transaction makes every shard `active` on its server (new map version, NOTIFY) and
 *    records `switched`. Writers that waited on the lock met the fence; routers retry them on the map that NOTIFY
 *    announces, on the shards.
 * Between 2 and 3 both sides refuse writes: a crash there pauses writes (SF001, retried by routers for
 * writeRetryMs) until a rerun of `adopt run` switches (the phase `fenced` says so).
 * Every change the application made reached the shards through the one ordered stream whose state was verified in
 * 1, and the stream was drained to the lock's LSN in 2: that is why the pause needs no second scan.
 */
export interface CutoverResult {
  /** From the lock to the switch's commit: how long writes waited. */
  pauseMs: number;
  /** The short pause that pinned the moment verified. */
  verifyPauseMs: number;
  /** The comparison itself (outside any pause). */
  verifyMs: number;
  mapVersion: bigint;
}

export interface CutoverContext {
  stream: Stream;
  catalog: pg.Client;
  sourceUrl: string;
  /** Every adopted table on the source (names in `schema`). */
  tables: string[];
  schema: string;
  pauseBoundMs: number;
  logicalShards: number;
  catalogServer: string;
  afterStep?: (step: string) => Promise<void>;
}

const LOCK_ATTEMPTS = 5;

async function lockSource(c: CutoverContext, locker: pg.Client, isolation: string): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const at = performance.now();
    await locker.query(`BEGIN ISOLATION LEVEL ${isolation}`);
    try {
      await locker.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.round(c.pauseBoundMs / 4))}`);
      await locker.query(
        `LOCK TABLE ${c.tables.map((t) => qualified(c.schema, t)).join(', ')} IN EXCLUSIVE MODE`,
      );
      return at;
    } catch (error) {
      await locker.query('ROLLBACK').catch(() => {});
      if ((error as { code?: string }).code === '55P03' && attempt < LOCK_ATTEMPTS) continue;
      throw (error as { code?: string }).code === '55P03'
        ? new ShardflakeError(
            'ADOPT_FAILED',
            `could not lock the source's tables for the cutover within ${LOCK_ATTEMPTS} tries: long transactions hold them; nothing was fenced, run adopt cutover again`,
          )
        : wrapPgError(error);
    }
  }
}

/** Step 1: the copies compared at one pinned moment; returns the pause and the comparison's time. */
async function verifyPinned(c: CutoverContext): Promise<{ pauseMs: number; verifyMs: number }> {
  const open: pg.Client[] = [];
  try {
    const locker = await connect(c.sourceUrl, { applicationName: 'shardflake adopt cutover' });
    open.push(locker);
    await locker.query(boundedSessionSql(c.pauseBoundMs));
    const pinnedSource = await connect(c.sourceUrl, { applicationName: 'shardflake adopt verify' });
    open.push(pinnedSource);
    const at = await lockSource(c, locker, 'REPEATABLE READ');
    let lsn: string;
    try {
      const { rows } = await locker.query(
        'SELECT pg_current_wal_lsn()::text AS lsn, pg_export_snapshot() AS snapshot',
      );
      const r = rows[0] as { lsn: string; snapshot: string };
      lsn = r.lsn;
      await pinnedSource.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      await pinnedSource.query(`SET TRANSACTION SNAPSHOT ${quoteLiteral(r.snapshot)}`);
      await pinnedSource.query('SELECT 1');
      await locker.query('COMMIT');
    } catch (error) {
      await locker.query('ROLLBACK').catch(() => {});
      throw error;
    }
    const pauseMs = performance.now() - at;
    await c.stream.drain(lsn);
    const pinned = new Map<string, pg.Client>();
    for (const server of c.stream.targets.servers) {
      const client = await c.stream.targets.connect(server, 'shardflake adopt verify');
      open.push(client);
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      await client.query('SELECT 1');
      pinned.set(server, client);
    }
    const started = performance.now();
    const differences = await compareCopies(c.stream.model, c.stream.targets, pinnedSource, pinned);
    if (differences.length > 0)
      throw new ShardflakeError(
        'ADOPT_FAILED',
        `the shards differ from the source at the verified moment (nothing was fenced): ${differences.slice(0, 10).join('; ')}${differences.length > 10 ? `; and ${differences.length - 10} more` : ''}`,
      );
    return { pauseMs, verifyMs: performance.now() - started };
  } finally {
    await Promise.all(open.map((client) => client.end().catch(() => {})));
  }
}

export function adoptedMessage(catalogServer: string): string {
  return `this table was adopted into a shardflake cluster (catalog on server ${catalogServer}); write through the router, which now serves it from the shards`;
}

const PAUSE_ATTEMPTS = 3;

/** A write pause that did not finish within its bound (nothing was fenced); `error` is what to report. */
class PauseOverrun extends Error {
  constructor(readonly error: ShardflakeError) {
    super(error.message);
  }
}

/** Step 2: lock, drain to the lock's LSN, fence, commit; returns when the pause started. */
async function fencedPause(c: CutoverContext): Promise<number> {
  const locker = await connect(c.sourceUrl, { applicationName: 'shardflake adopt cutover' });
  try {
    await locker.query(boundedSessionSql(c.pauseBoundMs));
    const pausedAt = await lockSource(c, locker, 'READ COMMITTED');
    try {
      await locker.query(`SET LOCAL statement_timeout = ${Math.max(1, Math.round(c.pauseBoundMs))}`);
      const { rows } = await locker.query('SELECT pg_current_wal_lsn()::text AS lsn');
      await c.stream.drain((rows[0] as { lsn: string }).lsn);
      await locker.query(fenceSql(c.schema, c.tables, adoptedMessage(c.catalogServer)));
      await locker.query('COMMIT');
      return pausedAt;
    } catch (error) {
      await locker.query('ROLLBACK').catch(() => {});
      if (
        error instanceof ShardflakeError &&
        error.code !== 'DATABASE_ERROR' &&
        error.code !== 'SERVER_UNREACHABLE'
      )
        throw error;
      throw new PauseOverrun(
        new ShardflakeError(
          'ADOPT_FAILED',
          `the cutover's write pause did not finish within ${c.pauseBoundMs} ms in ${PAUSE_ATTEMPTS} tries (${(error instanceof ShardflakeError ? error : wrapPgError(error)).message}); nothing was fenced and writes go on on the source; run adopt cutover again when the source is less busy, or raise adopt.pauseBoundMs`,
          { cause: error },
        ),
      );
    }
  } finally {
    await locker.end().catch(() => {});
  }
}

/** Steps 2 and 3, after the verification; `verified` false on a rerun that finds the source fenced already. */
export async function cutoverAdoption(c: CutoverContext, fenced: boolean): Promise<CutoverResult> {
  let verify = { pauseMs: 0, verifyMs: 0 };
  let pausedAt = performance.now();
  if (!fenced) {
    await c.stream.catchUp();
    verify = await verifyPinned(c);
    await c.afterStep?.('verified');
    // A pause that outgrows its bound ends with nothing fenced (the locking session is ended by the server):
    // the stream catches up again, and the pause is tried again, a few times.
    for (let attempt = 1; ; attempt++) {
      await c.stream.catchUp();
      try {
        pausedAt = await fencedPause(c);
        break;
      } catch (error) {
        if (!(error instanceof PauseOverrun)) throw error;
        if (attempt >= PAUSE_ATTEMPTS) throw error.error;
      }
    }
    await setAdoptionPhase(c.catalog, 'fenced');
    await c.afterStep?.('fenced');
  }
  // After the fence nothing more can commit on the source's tables: whatever the slot still holds is applied.
  await c.stream.catchUp();
  let mapVersion = 0n;
  await c.catalog.query('BEGIN');
  try {
    mapVersion = await setShardsState(
      c.catalog,
      Array.from({ length: c.logicalShards }, (_, i) => i),
      'active',
    );
    await setAdoptionPhase(c.catalog, 'switched', { pauseMs: performance.now() - pausedAt });
    await c.catalog.query('COMMIT');
  } catch (error) {
    await c.catalog.query('ROLLBACK').catch(() => {});
    throw wrapPgError(error);
  }
  const pauseMs = fenced ? 0 : performance.now() - pausedAt;
  await c.afterStep?.('switched');
  return { pauseMs, verifyPauseMs: verify.pauseMs, verifyMs: verify.verifyMs, mapVersion };
}

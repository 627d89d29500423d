import { ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * Restore points (backups/restore-point.ts has the argument): the advisory lock that holds cross-server decisions
 * off while one is written, and the catalog's record of every restore point taken.
 *
 * The lock is one advisory key, the same on every server. Whatever makes a decision across servers takes it SHARED
 * inside the transaction whose COMMIT is the decision — the decision row of a two-phase commit (INSERT_DECISION_SQL
 * in transactions.ts) and a move's catalog switch (move/cutover.ts) — so it is released by that COMMIT. A restore
 * point takes it EXCLUSIVE on every server while it writes `pg_create_restore_point`. Nothing else takes it: a
 * commit inside one server never waits for a restore point.
 */
export const RESTORE_POINT_LOCK = [0x53465250, 0] as const; // 'SFRP'

/**
 * A condition that takes the lock shared and is true, for the WHERE of the statement that writes a decision
 * (`pg_advisory_xact_lock_shared` returns void, which IS NOT NULL).
 */
export const HOLD_OFF_RESTORE_POINTS = `pg_catalog.pg_advisory_xact_lock_shared(${RESTORE_POINT_LOCK[0]}, ${RESTORE_POINT_LOCK[1]}) IS NOT NULL`;

/** Takes the lock shared for the rest of the caller's transaction (call inside it). */
export async function holdOffRestorePoints(client: Queryable): Promise<void> {
  await client.query(`SELECT ${HOLD_OFF_RESTORE_POINTS}`);
}

/**
 * Opens a transaction and takes the lock exclusive in it, waiting at most `lockTimeoutMs`: one round trip, so the
 * request is queued (and new decisions queue behind it) as soon as it arrives. On an error the transaction is left
 * open and aborted: the caller rolls it back.
 */
export async function lockOutDecisions(client: Queryable, lockTimeoutMs: number): Promise<void> {
  await client.query(
    `BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}; SELECT pg_catalog.pg_advisory_xact_lock(${RESTORE_POINT_LOCK[0]}, ${RESTORE_POINT_LOCK[1]})`,
  );
}

/**
 * `taking`: reserved, being written now (or the command died, or this catalog was itself restored to that point:
 * the row is committed just before the points are written); `taken`: written on every server; `partial`: written
 * on some servers only — never restore to it.
 */
export const RESTORE_POINT_STATES = ['taking', 'taken', 'partial'] as const;
/** One of `RESTORE_POINT_STATES`. */
export type RestorePointState = (typeof RESTORE_POINT_STATES)[number];

export const RESTORE_POINTS_SQL_VERSION = 1;

export function restorePointsSql(): string {
  const states = RESTORE_POINT_STATES.map((s) => `'${s}'`).join(', ');
  return `
CREATE TABLE IF NOT EXISTS shardflake.restore_points (
  name text PRIMARY KEY,
  state text NOT NULL CHECK (state IN (${states})),
  started_at timestamptz NOT NULL DEFAULT now(),
  taken_at timestamptz,
  lsns jsonb NOT NULL DEFAULT '{}',
  held_ms double precision,
  error text
);
COMMENT ON TABLE shardflake.restore_points IS 'shardflake restore points v${RESTORE_POINTS_SQL_VERSION}';`;
}

/** One restore point as the catalog records it. */
export interface RestorePointRecord {
  /** The restore point's name. */
  name: string;
  /** `taken`, `taking` or `partial` (see RESTORE_POINT_STATES). */
  state: RestorePointState;
  /** When the command reserved the name (ISO 8601). */
  startedAt: string;
  /** When every point was written (null unless `taken`). */
  takenAt: string | null;
  /** Each server's LSN of its point, for the servers it was written on. */
  lsns: Record<string, string>;
  /** How long cross-server decisions were held off, in ms. */
  heldMs: number | null;
  /** Why a `partial` one is partial. */
  error: string | null;
}

function toRecord(row: Record<string, unknown>): RestorePointRecord {
  const state = row.state as string;
  if (!(RESTORE_POINT_STATES as readonly string[]).includes(state))
    throw new ShardflakeError(
      'DATABASE_ERROR',
      `restore point ${String(row.name)} has an unknown state ${state}`,
    );
  return {
    name: row.name as string,
    state: state as RestorePointState,
    startedAt: (row.started_at as Date).toISOString(),
    takenAt: row.taken_at ? (row.taken_at as Date).toISOString() : null,
    lsns: (row.lsns as Record<string, string>) ?? {},
    heldMs: (row.held_ms as number | null) ?? null,
    error: (row.error as string | null) ?? null,
  };
}

const COLUMNS = 'name, state, started_at, taken_at, lsns, held_ms, error';

async function tableExists(catalog: Queryable): Promise<boolean> {
  const { rows } = await catalog.query("SELECT to_regclass('shardflake.restore_points') IS NOT NULL AS ok");
  return (rows[0] as { ok: boolean }).ok;
}

/** Creates the table unless it is there (serialized: two first restore points at once would collide). */
export async function installRestorePoints(catalog: Queryable): Promise<void> {
  if (await tableExists(catalog)) return;
  await catalog.query('BEGIN');
  try {
    await catalog.query(`SELECT pg_advisory_xact_lock(${RESTORE_POINT_LOCK[0]}, -1)`);
    await catalog.query(restorePointsSql());
    await catalog.query('COMMIT');
  } catch (error) {
    await catalog.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** The restore point of that name, or null. */
export async function findRestorePoint(catalog: Queryable, name: string): Promise<RestorePointRecord | null> {
  if (!(await tableExists(catalog))) return null;
  const { rows } = await catalog.query(`SELECT ${COLUMNS} FROM shardflake.restore_points WHERE name = $1`, [
    name,
  ]);
  return rows[0] ? toRecord(rows[0]) : null;
}

/**
 * Reserves a name (state `taking`), committed before anything is written; false when the name is taken (by an
 * earlier restore point, or one being taken now).
 */
export async function reserveRestorePoint(catalog: Queryable, name: string): Promise<boolean> {
  const { rowCount } = await catalog.query(
    `INSERT INTO shardflake.restore_points (name, state) VALUES ($1, 'taking') ON CONFLICT (name) DO NOTHING`,
    [name],
  );
  return rowCount === 1;
}

/** Records the points written: `taken` when every server has one, `partial` (with the reason) otherwise. */
export async function recordRestorePoint(
  catalog: Queryable,
  name: string,
  result: { lsns: Record<string, string>; heldMs: number; error?: string },
): Promise<RestorePointRecord> {
  const { rows } = await catalog.query(
    `UPDATE shardflake.restore_points
        SET state = CASE WHEN $4::text IS NULL THEN 'taken' ELSE 'partial' END,
            taken_at = CASE WHEN $4::text IS NULL THEN now() END, lsns = $2::jsonb, held_ms = $3, error = $4
      WHERE name = $1 RETURNING ${COLUMNS}`,
    [name, JSON.stringify(result.lsns), result.heldMs, result.error ?? null],
  );
  return toRecord(rows[0] as Record<string, unknown>);
}

/** Gives a reserved name back: nothing was written under it. */
export async function releaseRestorePoint(catalog: Queryable, name: string): Promise<void> {
  await catalog.query(`DELETE FROM shardflake.restore_points WHERE name = $1 AND state = 'taking'`, [name]);
}

/** The latest restore point (by the time it was started), or null when none was ever taken. */
export async function lastRestorePoint(catalog: Queryable): Promise<RestorePointRecord | null> {
  if (!(await tableExists(catalog))) return null;
  const { rows } = await catalog.query(
    `SELECT ${COLUMNS} FROM shardflake.restore_points ORDER BY started_at DESC, name DESC LIMIT 1`,
  );
  return rows[0] ? toRecord(rows[0]) : null;
}

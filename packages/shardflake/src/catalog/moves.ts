import { ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';
import { SHARD_LOCK_CLASS } from './shards.js';

/**
 * The steps of an online shard move, in order. Each name says what is already true once the catalog records it,
 * so a rerun after a crash knows exactly which actions have happened (the action of the next phase may have
 * started, which is why every action is idempotent):
 *
 * - `planned`     the move row exists, input was checked, the shard is marked `moving` (migrations refuse it).
 * - `prepared`    the target holds the shard's schema, generator and empty tables; the source has a publication.
 * - `subscribed`  the target's subscription (and the source's replication slot) exist; the initial copy runs.
 * - `synced`      every table finished its initial copy and the target is caught up to within a few MB.
 * - `fenced`      writes were paused, the target caught up to the source's last LSN, both copies verified equal,
 *                 the generator moved, and the source fenced for good (SF001) — in one source transaction.
 * - `switched`    the catalog places the shard on the target (new map version, NOTIFY sent).
 * - `done`        subscription, publication and slots are dropped; the fenced old copy waits for `cluster cleanup`.
 * - `rolled_back` the move was undone: target copy and replication objects removed, shard active on its source.
 *
 * Before `switched` a failed or interrupted move rolls back (or resumes, if rerun towards the same target); from
 * `switched` on it only rolls forward, because the target is then the one writable copy.
 */
export const MOVE_PHASES = [
  'planned',
  'prepared',
  'subscribed',
  'synced',
  'fenced',
  'switched',
  'done',
  'rolled_back',
] as const;
export type MovePhase = (typeof MOVE_PHASES)[number];

/** Phases after which the move has ended, one way or the other. */
export const FINAL_PHASES = ['done', 'rolled_back'] as const satisfies readonly MovePhase[];

export function isMovePhase(value: unknown): value is MovePhase {
  return typeof value === 'string' && (MOVE_PHASES as readonly string[]).includes(value);
}

export function parseMovePhase(value: unknown): MovePhase {
  if (!isMovePhase(value)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `${JSON.stringify(value)} is not a move phase (phases: ${MOVE_PHASES.join(', ')})`,
    );
  }
  return value;
}

export function isFinal(phase: MovePhase): boolean {
  return (FINAL_PHASES as readonly string[]).includes(phase);
}

/** True when `phase` is at or after `than` in the forward order (rolled_back is after nothing but itself). */
export function reached(phase: MovePhase, than: MovePhase): boolean {
  if (phase === 'rolled_back' || than === 'rolled_back') return phase === than;
  return MOVE_PHASES.indexOf(phase) >= MOVE_PHASES.indexOf(than);
}

/**
 * The catalog's record of shard moves: one row per move in `shardflake.moves`, its phase written after each step,
 * so a rerun after a crash knows where the last run stopped. A partial unique index allows at most one unfinished
 * move per shard, and the shard lock (src/fence/shard-lock.ts, held by the catalog connection of the running
 * move) tells a live move from a crashed one: the lock disappears with the crashed process's connection.
 */
/**
 * 2: `batch_id`, the set of shards a move shares one replication stream with. 3: `verified_digest`, the old copy's
 * row counts and checksums per table once fenced, so `cluster cleanup` can tell a copy that took writes later.
 */
export const MOVES_SQL_VERSION = 3;

export function movesSql(): string {
  const phases = MOVE_PHASES.map((p) => `'${p}'`).join(', ');
  return `
CREATE TABLE IF NOT EXISTS shardflake.moves (
  id bigserial PRIMARY KEY,
  shard integer NOT NULL,
  schema_name text NOT NULL,
  from_server text NOT NULL,
  to_server text NOT NULL,
  phase text NOT NULL CHECK (phase IN (${phases})),
  started_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  owner text,
  error text,
  rows_copied bigint,
  pause_ms double precision,
  old_copy_dropped_at timestamptz,
  subscription_oid bigint
);
-- A set of shards moving together shares one publication, slot and subscription, named after the batch id (the
-- id of its first move). NULL: a move of its own (named after its own id).
ALTER TABLE shardflake.moves ADD COLUMN IF NOT EXISTS batch_id bigint;
CREATE INDEX IF NOT EXISTS moves_batch ON shardflake.moves (batch_id) WHERE batch_id IS NOT NULL;
-- The fenced old copy's digest (per table: rows, checksum), written when the move finishes.
ALTER TABLE shardflake.moves ADD COLUMN IF NOT EXISTS verified_digest jsonb;
CREATE UNIQUE INDEX IF NOT EXISTS moves_one_unfinished_per_shard
  ON shardflake.moves (shard) WHERE phase NOT IN ('done', 'rolled_back');`;
}

export interface MoveRecord {
  id: bigint;
  shard: number;
  schema: string;
  from: string;
  to: string;
  phase: MovePhase;
  error: string | null;
  oldCopyDropped: boolean;
  /** The target's subscription oid, once created: names the source's table-sync slots (pg_OID_sync_…). */
  subscriptionOid: bigint | null;
  /** The set this move belongs to (the id of the set's first move), or null for a move of its own. */
  batchId: bigint | null;
  /** Rows the copies held when they were compared (null before the switch). */
  rowsCopied: bigint | null;
  /** The fenced old copy's per-table rows and checksum, recorded when the move finished (null before). */
  verifiedDigest: VerifiedTable[] | null;
}

export interface VerifiedTable {
  table: string;
  rows: bigint;
  checksum: bigint;
}

/** The id that names a move's replication objects: its set's, or its own. */
export function streamId(record: Pick<MoveRecord, 'id' | 'batchId'>): bigint {
  return record.batchId ?? record.id;
}

const COLUMNS =
  'id, shard, schema_name, from_server, to_server, phase, error, old_copy_dropped_at, subscription_oid, batch_id, rows_copied, verified_digest';

function toRecord(row: Record<string, unknown>): MoveRecord {
  return {
    id: BigInt(row.id as bigint),
    shard: row.shard as number,
    schema: row.schema_name as string,
    from: row.from_server as string,
    to: row.to_server as string,
    phase: parseMovePhase(row.phase),
    error: (row.error as string | null) ?? null,
    oldCopyDropped: row.old_copy_dropped_at !== null && row.old_copy_dropped_at !== undefined,
    subscriptionOid:
      row.subscription_oid === null || row.subscription_oid === undefined
        ? null
        : BigInt(row.subscription_oid as bigint),
    batchId: row.batch_id === null || row.batch_id === undefined ? null : BigInt(row.batch_id as bigint),
    rowsCopied:
      row.rows_copied === null || row.rows_copied === undefined ? null : BigInt(row.rows_copied as bigint),
    verifiedDigest: Array.isArray(row.verified_digest)
      ? (row.verified_digest as { table: string; rows: string; checksum: string }[]).map((t) => ({
          table: t.table,
          rows: BigInt(t.rows),
          checksum: BigInt(t.checksum),
        }))
      : null,
  };
}

export async function installMoves(catalog: Queryable): Promise<void> {
  // Two first moves at once would race on CREATE TABLE IF NOT EXISTS (a unique violation in pg_type): serialize.
  await catalog.query('BEGIN');
  try {
    await catalog.query('SELECT pg_advisory_xact_lock($1::int, -1)', [SHARD_LOCK_CLASS]);
    await catalog.query(movesSql());
    await catalog.query('COMMIT');
  } catch (error) {
    await catalog.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

export async function listMoves(catalog: Queryable): Promise<MoveRecord[]> {
  const { rows } = await catalog.query(`SELECT ${COLUMNS} FROM shardflake.moves ORDER BY id`);
  return rows.map(toRecord);
}

export async function recordPhase(
  catalog: Queryable,
  id: bigint,
  phase: MovePhase,
  extra: { error?: string | null; rowsCopied?: bigint; pauseMs?: number } = {},
): Promise<void> {
  await catalog.query(
    `UPDATE shardflake.moves SET phase = $2, updated_at = now(),
       error = CASE WHEN $3::boolean THEN $4 ELSE error END,
       rows_copied = coalesce($5, rows_copied), pause_ms = coalesce($6, pause_ms)
     WHERE id = $1`,
    [
      id,
      phase,
      extra.error !== undefined,
      extra.error ?? null,
      extra.rowsCopied ?? null,
      extra.pauseMs ?? null,
    ],
  );
}

export async function markOldCopyDropped(catalog: Queryable, id: bigint): Promise<void> {
  await catalog.query('UPDATE shardflake.moves SET old_copy_dropped_at = now() WHERE id = $1', [id]);
}

/** The unfinished moves of these shards (at most one each). */
export async function unfinishedMoves(catalog: Queryable, shards: readonly number[]): Promise<MoveRecord[]> {
  const { rows } = await catalog.query(
    `SELECT ${COLUMNS} FROM shardflake.moves WHERE shard = ANY($1::int[]) AND phase NOT IN ('done', 'rolled_back') ORDER BY id`,
    [shards],
  );
  return rows.map(toRecord);
}

/** Every unfinished move of a set. */
export async function unfinishedBatch(catalog: Queryable, batchId: bigint): Promise<MoveRecord[]> {
  const { rows } = await catalog.query(
    `SELECT ${COLUMNS} FROM shardflake.moves WHERE batch_id = $1 AND phase NOT IN ('done', 'rolled_back') ORDER BY id`,
    [batchId],
  );
  return rows.map(toRecord);
}

/**
 * Records a set of moves in one statement, all `planned`, in one batch named after the first one's id. Call inside
 * the transaction that marks the shards `moving`.
 */
export async function createBatch(
  catalog: Queryable,
  moves: readonly { shard: number; schema: string; from: string; to: string }[],
  owner: string,
): Promise<MoveRecord[]> {
  const { rows: made } = await catalog.query(
    `INSERT INTO shardflake.moves (shard, schema_name, from_server, to_server, phase, owner)
     SELECT shard, schema_name, from_server, to_server, 'planned', $5
       FROM unnest($1::int[], $2::text[], $3::text[], $4::text[]) AS m(shard, schema_name, from_server, to_server)
     RETURNING id`,
    [
      moves.map((m) => m.shard),
      moves.map((m) => m.schema),
      moves.map((m) => m.from),
      moves.map((m) => m.to),
      owner,
    ],
  );
  const ids = (made as { id: bigint }[]).map((r) => String(r.id));
  const { rows } = await catalog.query(
    `UPDATE shardflake.moves SET batch_id = (SELECT min(x) FROM unnest($1::bigint[]) x) WHERE id = ANY($1::bigint[])
     RETURNING ${COLUMNS}`,
    [ids],
  );
  return rows.map(toRecord).sort((a, b) => (a.id < b.id ? -1 : 1));
}

/** Records the same phase for several moves at once. */
export async function recordPhases(
  catalog: Queryable,
  ids: readonly bigint[],
  phase: MovePhase,
  extra: { subscriptionOid?: bigint } = {},
): Promise<void> {
  await catalog.query(
    `UPDATE shardflake.moves SET phase = $2, updated_at = now(), subscription_oid = coalesce($3, subscription_oid)
      WHERE id = ANY($1::bigint[])`,
    [ids.map(String), phase, extra.subscriptionOid ?? null],
  );
}

/**
 * The unfinished move of a shard, for messages; null when none. Throws when no move ever ran (the table does not
 * exist yet): callers treat that as none.
 */
export async function runningMove(
  catalog: Queryable,
  shard: number,
): Promise<{ id: bigint; to: string; phase: string } | null> {
  const { rows } = await catalog.query(
    `SELECT id, to_server AS to, phase FROM shardflake.moves
      WHERE shard = $1 AND phase NOT IN ('done', 'rolled_back')`,
    [shard],
  );
  const row = rows[0] as { id: bigint; to: string; phase: string } | undefined;
  return row ? { id: BigInt(row.id), to: row.to, phase: row.phase } : null;
}

/**
 * Records the switch of a cutover group: each move `switched`, with the rows verified and the pause it took (null
 * keeps what an earlier run recorded). Call in the transaction that places the shards on the target.
 */
export async function recordSwitched(
  catalog: Queryable,
  moves: readonly { id: bigint; rows: bigint; pauseMs: number | null }[],
): Promise<void> {
  await catalog.query(
    `UPDATE shardflake.moves AS m SET phase = 'switched', updated_at = now(), rows_copied = x.rows,
            pause_ms = coalesce(x.pause, m.pause_ms)
       FROM unnest($1::bigint[], $2::bigint[], $3::float8[]) AS x(id, rows, pause)
      WHERE m.id = x.id`,
    [moves.map((m) => String(m.id)), moves.map((m) => String(m.rows)), moves.map((m) => m.pauseMs)],
  );
}

/** Finished moves grouped by stream (a set, or a move of its own): shards, rows copied, seconds from start to end. */
export async function finishedStreams(
  catalog: Queryable,
): Promise<{ shards: number; rows: number; seconds: number }[]> {
  const { rows } = await catalog.query(
    `SELECT count(*)::float8 AS shards, coalesce(sum(rows_copied), 0)::float8 AS rows,
            extract(epoch FROM max(updated_at) - min(started_at))::float8 AS seconds
       FROM shardflake.moves WHERE phase = 'done'
      GROUP BY coalesce(batch_id, id)`,
  );
  return rows as { shards: number; rows: number; seconds: number }[];
}

/**
 * The move rows as the dashboard shows them: every column as JSON (so columns newer code adds show up), unfinished
 * first (oldest first), then the `recent` latest finished; and the phase order from the table's CHECK constraint.
 * Before the first move (no table): no phases, no rows.
 */
export async function readMoveRows(
  catalog: Queryable,
  recent: number,
): Promise<{ phases: string[]; rows: { row: Record<string, unknown>; finished: boolean }[] }> {
  const exists = await catalog.query("SELECT to_regclass('shardflake.moves') IS NOT NULL AS ok");
  if (!(exists.rows[0] as { ok: boolean }).ok) return { phases: [], rows: [] };
  const constraint = await catalog.query(
    `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint
     WHERE conrelid = 'shardflake.moves'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%phase%'`,
  );
  const def = (constraint.rows[0] as { def: string } | undefined)?.def ?? '';
  const phases = [...def.matchAll(/'([a-z_]+)'/g)].map((m) => m[1] as string);
  const { rows } = await catalog.query(
    `(SELECT to_jsonb(m) AS row, false AS finished FROM shardflake.moves m
      WHERE phase <> ALL ($1::text[]) ORDER BY id)
     UNION ALL
     (SELECT to_jsonb(m), true FROM shardflake.moves m
      WHERE phase = ANY ($1::text[]) ORDER BY id DESC LIMIT $2)`,
    [FINAL_PHASES, recent],
  );
  return { phases, rows: rows as { row: Record<string, unknown>; finished: boolean }[] };
}

/** Records the fenced old copies' digests (per move: each table's rows and checksum). */
export async function recordVerifiedDigests(
  catalog: Queryable,
  digests: readonly { id: bigint; tables: readonly VerifiedTable[] }[],
): Promise<void> {
  if (digests.length === 0) return;
  await catalog.query(
    `UPDATE shardflake.moves AS m SET verified_digest = x.d
       FROM unnest($1::bigint[], $2::jsonb[]) AS x(id, d) WHERE m.id = x.id`,
    [
      digests.map((d) => String(d.id)),
      digests.map((d) =>
        JSON.stringify(
          d.tables.map((t) => ({ table: t.table, rows: String(t.rows), checksum: String(t.checksum) })),
        ),
      ),
    ],
  );
}

/**
 * Every unfinished move with whether a live process holds its shard's lock (fence/shard-lock.ts: a session
 * advisory lock on the catalog, gone with the process): `abandoned` when none does. Empty before the first move.
 */
export async function unfinishedMovesWithOwners(
  catalog: Queryable,
): Promise<(MoveRecord & { owner: string | null; abandoned: boolean })[]> {
  const exists = await catalog.query("SELECT to_regclass('shardflake.moves') IS NOT NULL AS ok");
  if (!(exists.rows[0] as { ok: boolean }).ok) return [];
  const { rows } = await catalog.query(
    `SELECT ${COLUMNS}, owner,
            NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
                          AND l.classid = $1::oid AND l.objid = m.shard::oid AND l.objsubid = 2) AS abandoned
       FROM shardflake.moves m WHERE phase NOT IN ('done', 'rolled_back') ORDER BY id`,
    [SHARD_LOCK_CLASS],
  );
  return rows.map((r: Record<string, unknown>) => ({
    ...toRecord(r),
    owner: (r.owner as string | null) ?? null,
    abandoned: r.abandoned as boolean,
  }));
}

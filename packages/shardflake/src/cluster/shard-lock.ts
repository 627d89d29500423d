import type pg from 'pg';
import { ShardflakeError } from '../errors.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * The per-shard lock that keeps a shard's move and its migrations apart: a session advisory lock on the catalog,
 * held by the connection of whoever works on the shard (a move for its whole run, `cluster migrate` for one
 * shard's step). Because it belongs to a connection, it disappears with a crashed process, which is how a live
 * move is told from a crashed one. It lives here, not with moves, because migrations need it too and the cluster
 * layer never imports move code.
 */
export const SHARD_LOCK_CLASS = 0x5f4d4f56; // "_MOV": the key space is (class, shard); (class, -1) guards setup.

/**
 * The unfinished move of a shard as the catalog's moves table records it, for messages; null when none. Throws when
 * no move ever ran (the table does not exist yet): callers treat that as none.
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
 * Takes the shard's lock on `catalog` (a dedicated connection, held until `unlockShard` or disconnect). Throws
 * SHARD_BUSY when another live process holds it.
 */
export async function lockShard(catalog: pg.Client, shard: number): Promise<void> {
  const { rows } = await catalog.query('SELECT pg_try_advisory_lock($1::int, $2::int) AS ok', [
    SHARD_LOCK_CLASS,
    shard,
  ]);
  if (!(rows[0] as { ok: boolean }).ok) {
    const running = await runningMove(catalog, shard).catch(() => null);
    throw new ShardflakeError(
      'SHARD_BUSY',
      running
        ? `shard ${shard} is being moved by another process (move #${running.id} to server ${running.to}, phase ${running.phase}); wait for it to finish`
        : `shard ${shard} is locked by another process (a move starting, or cluster migrate working on it); try again`,
    );
  }
}

export async function unlockShard(catalog: pg.Client, shard: number): Promise<void> {
  await catalog.query('SELECT pg_advisory_unlock($1::int, $2::int)', [SHARD_LOCK_CLASS, shard]);
}

import type pg from 'pg';
import { runningMove } from '../catalog/moves.js';
import { SHARD_LOCK_CLASS } from '../catalog/shards.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';

export { SHARD_LOCK_CLASS };

/**
 * The per-shard lock that keeps a shard's move and its migrations apart: a session advisory lock on the catalog,
 * held by the connection of whoever works on the shard (a move for its whole run, `cluster migrate` for one
 * shard's step). Because it belongs to a connection, it disappears with a crashed process, which is how a live
 * move is told from a crashed one. It lives here, not with moves, because migrations need it too and the cluster
 * layer never imports move code.
 */

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

/**
 * Takes the shard's lock on `lock` (a catalog connection of a migration or a lookup build), or says why the shard
 * is refused (null once locked). A running move holds the lock for its whole run, so the shard is refused at once;
 * another migration or build holds it for one step, so that is waited for (up to the connection's lock_timeout).
 */
export async function lockShardWaiting(lock: pg.Client, shard: number): Promise<string | null> {
  try {
    await lockShard(lock, shard);
    return null;
  } catch (error) {
    if (!(error instanceof ShardflakeError && error.code === 'SHARD_BUSY')) throw error;
  }
  const move = await runningMove(lock, shard).catch(() => null);
  if (move)
    return `the shard is being moved (move #${move.id} to server ${move.to}); migrate again after the move`;
  try {
    await lock.query('SELECT pg_advisory_lock($1::int, $2::int)', [SHARD_LOCK_CLASS, shard]);
    return null;
  } catch (error) {
    if ((error as { code?: string }).code === '55P03') {
      return 'another process (a move or a migration) kept the shard locked; migrate again';
    }
    throw wrapPgError(error);
  }
}

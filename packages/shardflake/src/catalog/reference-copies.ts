import type { Queryable } from '../postgres/connect.js';
import { bumpMapVersion } from './shards.js';

/**
 * Which servers hold a complete (synced) copy of the reference tables, in the catalog: the servers
 * `router.withReference` writes, whatever config the router started with (reference/servers.ts adds the servers
 * that hold shards). `cluster init` and `cluster migrate` record every server whose copy they made or found synced;
 * a move's reference fill records its target once the copy is filled, before the first shard moves there. A new
 * entry raises the map version and NOTIFYs in the same transaction, so routers re-read it at once, as they do a
 * moved shard.
 *
 * The catalog is where a router starts from, not what makes a write safe: a router may act on an older list (it
 * read the map before the fill recorded its target). Each server's copy carries its own list of the copies
 * (reference/sql.ts, `_shardflake_state.copies`), which a writer reads under its lock; reference/write.ts says why
 * that closes the race.
 */
export const REFERENCE_COPIES_SQL = `
CREATE TABLE IF NOT EXISTS shardflake.reference_copies (
  server text PRIMARY KEY,
  filled_at timestamptz NOT NULL DEFAULT now()
);`;

/** Records `servers` as holding a synced copy (those already listed stay as they are); true when one was new. */
export async function recordReferenceCopies(
  catalog: Queryable,
  servers: readonly string[],
): Promise<boolean> {
  if (servers.length === 0) return false;
  await catalog.query(REFERENCE_COPIES_SQL);
  await catalog.query('BEGIN');
  try {
    const { rowCount } = await catalog.query(
      `INSERT INTO shardflake.reference_copies (server) SELECT unnest($1::text[]) ON CONFLICT (server) DO NOTHING`,
      [[...servers]],
    );
    // Only a new copy changes what routers write: a re-record costs no map version and wakes no router.
    if ((rowCount ?? 0) > 0) await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    return (rowCount ?? 0) > 0;
  } catch (error) {
    await catalog.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** The servers the catalog records as holding a synced copy, by name; empty before anything was recorded. */
export async function readReferenceCopies(catalog: Queryable): Promise<string[]> {
  try {
    const { rows } = await catalog.query(
      "SELECT coalesce(array_agg(server ORDER BY server), '{}') AS servers FROM shardflake.reference_copies",
    );
    return (rows[0] as { servers: string[] }).servers;
  } catch (error) {
    // A catalog made before copies were recorded (42P01): none recorded yet.
    if ((error as { code?: string }).code === '42P01') return [];
    throw error;
  }
}

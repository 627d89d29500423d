import type { MoveRecord } from '../catalog/moves.js';
import type { Queryable } from '../postgres/connect.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { inTransaction } from './connections.js';
import { listTables } from './tables.js';
import { digestSchemas } from './verify.js';

/**
 * Copies of a shard on a server the catalog does not place it on ("leftovers"), and what may be done with them.
 *
 * A leftover is normally the fenced old copy of a finished move, or the target copy of a rolled-back one; both are
 * safe to drop. Two faults make one dangerous: a failover to a replica that had not replayed the fence brings back
 * an old copy that is writable, and a write acknowledged there exists nowhere else. So before anything is dropped:
 *
 * 1. Fence on discovery: an unfenced leftover is fenced at once (it is not the shard's home, so no write may land
 *    there), whatever happens next (fence/fence.ts `fenceSchema`; routers do it too: fence/strays.ts).
 * 2. Compare with the move's verified state: the old copy of a finished move must still hold exactly what the move
 *    recorded when it finished (per table: rows and checksum; for moves recorded before digests, the row count).
 *    A copy that differs took writes after its fence (or is an older state, from a replica that was behind): it is
 *    kept, named, and reported as a conflict with the rows to reconcile, never dropped.
 */
export interface LeftoverConflict {
  shard: number;
  server: string;
  schema: string;
  moveId: bigint;
  /** What differs from the verified state, per table. */
  differences: string[];
  /** Primary keys (of the newest rows) on the leftover copy that the shard's home lacks. */
  rowsToReconcile: string[];
}

/**
 * The conflict the leftover copy `schema` of `shard` on `server` is: the last finished move of the shard away from
 * that server recorded a verified state, and the copy no longer holds it. Null when it matches, or when no move
 * recorded a state to compare with. `home`: a connection to the shard's home, to name the rows to reconcile.
 */
export async function conflictOf(
  copy: Queryable,
  home: Queryable | undefined,
  leftover: { shard: number; server: string; schema: string },
  moves: readonly MoveRecord[],
): Promise<LeftoverConflict | null> {
  const move = [...moves]
    .reverse()
    .find((m) => m.shard === leftover.shard && m.from === leftover.server && m.phase === 'done');
  const differences = await differencesFromVerified(copy, leftover.schema, move);
  if (!move || !differences || differences.length === 0) return null;
  return {
    ...leftover,
    moveId: move.id,
    differences,
    rowsToReconcile: home ? await rowsMissingAtHome(copy, home, leftover.schema) : [],
  };
}

/**
 * What differs between a leftover copy and the state its move verified; empty when they match, null when the move
 * recorded nothing to compare with (a move that never switched: its target copy never took a client's write).
 */
async function differencesFromVerified(
  client: Queryable,
  schema: string,
  move: MoveRecord | undefined,
): Promise<string[] | null> {
  if (!move) return null;
  if (move.verifiedDigest) {
    const tables = move.verifiedDigest.map((t) => t.table);
    const present = new Set((await listTables(client, schema)).map((t) => t.name));
    const missing = tables.filter((t) => !present.has(t));
    if (missing.length > 0) return missing.map((t) => `${t}: missing`);
    const [now = []] = await inTransaction(client, () => digestSchemas(client, [{ schema, tables }]));
    const byTable = new Map(now.map((d) => [d.table, d]));
    return move.verifiedDigest.flatMap((v) => {
      const d = byTable.get(v.table);
      if (!d) return [`${v.table}: missing`];
      if (d.rows !== v.rows) return [`${v.table}: ${d.rows} rows, ${v.rows} when the move verified it`];
      if (d.checksum !== v.checksum) return [`${v.table}: same row count (${d.rows}) but different contents`];
      return [];
    });
  }
  if (move.rowsCopied !== null) {
    const tables = (await listTables(client, schema)).map((t) => t.name);
    const [now = []] = await inTransaction(client, () => digestSchemas(client, [{ schema, tables }], true));
    const rows = now.reduce((n, d) => n + d.rows, 0n);
    return rows === move.rowsCopied ? [] : [`${rows} rows, ${move.rowsCopied} when the move verified it`];
  }
  return null;
}

/**
 * Rows to reconcile: among the newest `scan` rows of each table with a one-column primary key on the leftover
 * copy, those whose key the shard's home lacks (ids grow, so writes made after the fence are the newest).
 */
async function rowsMissingAtHome(
  leftover: Queryable,
  home: Queryable,
  schema: string,
  limit = 20,
  scan = 1000,
): Promise<string[]> {
  const found: string[] = [];
  for (const table of await listTables(leftover, schema)) {
    if (table.primaryKey.length !== 1 || found.length >= limit) continue;
    const key = quoteIdent(table.primaryKey[0] as string, 'column');
    const { rows } = await leftover.query(
      `SELECT ${key}::text AS k FROM ${qualified(schema, table.name)} ORDER BY ${key} DESC LIMIT ${scan}`,
    );
    const keys = (rows as { k: string }[]).map((r) => r.k);
    if (keys.length === 0) continue;
    const there = await home.query(
      `SELECT ${key}::text AS k FROM ${qualified(schema, table.name)} WHERE ${key}::text = ANY($1::text[])`,
      [keys],
    );
    const atHome = new Set((there.rows as { k: string }[]).map((r) => r.k));
    for (const k of keys) {
      if (!atHome.has(k) && found.length < limit) found.push(`${table.name}.${table.primaryKey[0]}=${k}`);
    }
  }
  return found;
}

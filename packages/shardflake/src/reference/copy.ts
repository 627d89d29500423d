import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import type { ClusterConfig } from '../config/config.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { copyFrom, copyTo } from '../postgres/copy-streams.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { settlePreparedOnShards } from '../recovery/settle.js';
import { serverOrder } from './order.js';
import { BEGIN_WRITE, LIST_REFERENCE_TABLES_SQL, STATE_TABLE } from './sql.js';
import { type ReferenceState, readReferenceState } from './state.js';

/**
 * Filling an unsynced copy (a server added after the cluster was made) with the rows of a synced one, before any
 * shard lives there.
 *
 * Why the copy is exact: it locks the reference tables of every configured server, in server order (order.ts),
 * SHARE on each (which waits for every reference write in flight, prepared ones included, and holds back new ones
 * while readers go on) and ACCESS EXCLUSIVE on the copy being filled. With every server locked no write can commit
 * anywhere, so the source's rows are the rows every synced copy holds; the target is emptied, given the source's
 * rows (binary COPY, table by table, parents before children) and its sequences' positions, and marked synced in
 * the same transaction. Locking in server order, like every writer, means the copy and a writer meet at the first
 * server they share rather than deadlock across two; lock_timeout bounds the wait for a stuck writer.
 */
export interface FillOptions {
  lockTimeoutMs: number;
}

async function tablesOf(client: pg.Client): Promise<string[]> {
  const { rows } = await client.query(LIST_REFERENCE_TABLES_SQL);
  return (rows as { name: string }[]).map((r) => r.name);
}

/** Tables in an order where every table comes after the tables its foreign keys point to. */
async function parentsFirst(client: pg.Client, tables: readonly string[]): Promise<string[]> {
  const { rows } = await client.query(
    `SELECT c.relname::text AS child, p.relname::text AS parent FROM pg_constraint f
       JOIN pg_class c ON c.oid = f.conrelid JOIN pg_class p ON p.oid = f.confrelid
      WHERE f.contype = 'f' AND f.connamespace = to_regnamespace($1) AND f.conrelid <> f.confrelid`,
    [REFERENCE_SCHEMA],
  );
  const parents = new Map<string, string[]>();
  for (const r of rows as { child: string; parent: string }[]) {
    parents.set(r.child, [...(parents.get(r.child) ?? []), r.parent]);
  }
  const done: string[] = [];
  const visit = (t: string, path: Set<string>) => {
    if (done.includes(t) || path.has(t)) return;
    path.add(t);
    for (const p of parents.get(t) ?? []) if (tables.includes(p)) visit(p, path);
    done.push(t);
  };
  for (const t of tables) visit(t, new Set());
  return done;
}

/** The columns COPY can write: not dropped, not generated. */
async function copyColumns(client: pg.Client, table: string): Promise<string[]> {
  const { rows } = await client.query(
    `SELECT attname::text AS name FROM pg_attribute
      WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
      ORDER BY attnum`,
    [qualified(REFERENCE_SCHEMA, table)],
  );
  return (rows as { name: string }[]).map((r) => r.name);
}

/**
 * Fills `target`'s copy from a synced server when it is unsynced; returns where from and how many rows, or null
 * when there was nothing to do (missing copies are install.ts's business).
 */
export async function fillCopy(
  config: Pick<ClusterConfig, 'servers' | 'nodes' | 'catalog'>,
  clients: ReadonlyMap<string, pg.Client>,
  target: string,
  options: FillOptions,
): Promise<{ from: string; rows: number } | null> {
  const client = (server: string) => clients.get(server) as pg.Client;
  const first = await readReferenceState(client(target));
  if (!first || first.synced) return null;
  const order = serverOrder(config);
  // A reference write in doubt would hold its locks until recovery: settled by its decision first.
  for (const server of order)
    await settlePreparedOnShards(config, server, [REFERENCE_SCHEMA], { failWith: 'SHARD_BUSY' });
  const open: pg.Client[] = [];
  const states = new Map<string, ReferenceState | null>();
  try {
    for (const server of order) {
      const c = client(server);
      await c.query(`BEGIN; SET LOCAL lock_timeout = ${options.lockTimeoutMs}`);
      open.push(c);
      const tables = await tablesOf(c);
      if (tables.length > 0) {
        const mode = server === target ? 'ACCESS EXCLUSIVE' : 'SHARE';
        await c.query(
          `LOCK TABLE ${tables.map((t) => qualified(REFERENCE_SCHEMA, t)).join(', ')} IN ${mode} MODE`,
        );
      }
      states.set(server, await readReferenceState(c));
    }
    const mine = states.get(target);
    if (!mine || mine.synced) {
      // Another process filled it while this one waited for the locks.
      await Promise.all(open.map((c) => c.query('ROLLBACK')));
      open.length = 0;
      return null;
    }
    const same = (s: ReferenceState | null | undefined) =>
      s?.synced === true &&
      s.version === mine.version &&
      s.tables.length === mine.tables.length &&
      s.tables.every((t) => mine.tables.includes(t));
    const from = order.find((server) => server !== target && same(states.get(server)));
    if (from === undefined) {
      const synced = order.filter((server) => states.get(server)?.synced);
      throw new ShardflakeError(
        'REFERENCE_MISSING',
        synced.length === 0
          ? `server ${target}'s reference tables cannot be filled: no server holds a synced copy`
          : `server ${target}'s reference tables cannot be filled: no synced copy is at its version (reference migration ${mine.version}); run shardflake cluster migrate`,
      );
    }
    const source = client(from);
    const dest = client(target);
    const tables = await parentsFirst(dest, await tablesOf(dest));
    await dest.query(`SELECT ${BEGIN_WRITE}`);
    if (tables.length > 0) {
      await dest.query(`TRUNCATE ${tables.map((t) => qualified(REFERENCE_SCHEMA, t)).join(', ')}`);
    }
    let rows = 0;
    for (const table of tables) {
      const columns = (await copyColumns(dest, table)).map((c) => quoteIdent(c, 'column')).join(', ');
      const name = `${qualified(REFERENCE_SCHEMA, table)} (${columns})`;
      const reader = source.query(copyTo(`COPY ${name} TO STDOUT (FORMAT binary)`));
      const writer = dest.query(copyFrom(`COPY ${name} FROM STDIN (FORMAT binary)`));
      await pipeline(reader, writer);
      rows += Number(writer.rowCount ?? 0);
    }
    // Sequences (serial and identity columns) go on from where the source's are.
    const { rows: sequences } = await source.query(
      `SELECT c.relname::text AS name FROM pg_class c
        WHERE c.relnamespace = to_regnamespace($1) AND c.relkind = 'S'`,
      [REFERENCE_SCHEMA],
    );
    for (const { name } of sequences as { name: string }[]) {
      const seq = qualified(REFERENCE_SCHEMA, name);
      const { rows: at } = await source.query(`SELECT last_value, is_called FROM ${seq}`);
      const { last_value, is_called } = at[0] as { last_value: bigint; is_called: boolean };
      await dest.query('SELECT setval($1::regclass, $2, $3)', [seq, last_value.toString(), is_called]);
    }
    await dest.query(`UPDATE ${STATE_TABLE} SET synced = true, synced_from = $1, changed_at = now()`, [from]);
    await dest.query('COMMIT');
    open.splice(open.indexOf(dest), 1);
    await Promise.all(open.map((c) => c.query('COMMIT')));
    open.length = 0;
    return { from, rows };
  } catch (error) {
    await Promise.all(open.map((c) => c.query('ROLLBACK').catch(() => {})));
    if (error instanceof ShardflakeError) throw error;
    const e = wrapPgError(error);
    throw new ShardflakeError(e.code, `filling server ${target}'s reference tables failed: ${e.message}`, {
      sqlState: e.sqlState,
      detail: e.detail,
      cause: error,
    });
  }
}

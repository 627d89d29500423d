import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { readReferenceCopies } from '../catalog/reference-copies.js';
import type { ClusterConfig } from '../config/config.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { copyFrom, copyTo } from '../postgres/copy-streams.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { settlePreparedOnShards } from '../recovery/settle.js';
import { serverOrder } from './order.js';
import { recordCopies } from './servers.js';
import {
  BEGIN_WRITE,
  DIGEST_ALL,
  HAS_STATE_SQL,
  LIST_REFERENCE_TABLES_SQL,
  STATE_TABLE,
  WRITERS_TABLE,
} from './sql.js';
import { type ReferenceState, readReferenceState } from './state.js';

/**
 * Filling an unsynced copy (a server added after the cluster was made) with the rows of a synced one, before any
 * shard lives there, and making it a copy every writer writes from then on.
 *
 * Why the copy is exact. On every configured server that has reference tables, in server order (order.ts), it
 * takes SHARE on the writers table first — which waits for every reference write in flight there, prepared ones
 * included (each holds ROW EXCLUSIVE on it from its mark, sql.ts begin_write), and holds back new ones at their
 * mark, before they touch any table — then SHARE on the reference tables (ACCESS EXCLUSIVE on the copy being
 * filled). With every server held, no reference write can commit anywhere, so the source's rows are the rows
 * every synced copy holds; the target is emptied, given the source's rows (binary COPY, table by table, parents
 * before children) and its sequences' positions, its digests computed from those rows, and marked synced.
 *
 * Why a writer that started before the fill finished is not lost: every held server's copies list (and the
 * target's) gets the target, in the same transactions, and the target commits first. A writer whose mark on some
 * server came after the fill's lock there reads that list under its own lock and writes the target too
 * (write.ts); one whose marks all came before is waited for, and its rows are in what is copied. The catalog
 * records the target afterwards, so routers start from it too (a crash before that only costs writers one retry).
 *
 * Why it does not deadlock with writers: a writer takes its marks one server at a time in server order, before
 * any statement, and the fill takes its locks in the same order; a writer waiting for the fill holds marks only on
 * servers the fill already holds or does not need, and the fill never waits for a writer's table locks (a writer
 * has none until all its marks are taken). `lock_timeout` bounds the wait for a writer that is stuck (a prepared
 * one is settled by its decision first).
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
  // A copy on a server this config does not name could take a write while the fill runs: refused up front.
  notInConfig(target, await readReferenceCopies(client(config.catalog)), clients, 'the catalog lists it');
  const open: pg.Client[] = [];
  const states = new Map<string, ReferenceState | null>();
  try {
    for (const server of order) {
      const c = client(server);
      // READ COMMITTED whatever the server's default: the state is read after the locks, by a later snapshot.
      await c.query(
        `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = ${options.lockTimeoutMs}`,
      );
      open.push(c);
      if (!(await hasCopy(c))) {
        states.set(server, null);
        continue;
      }
      await c.query(`LOCK TABLE ${WRITERS_TABLE} IN SHARE MODE`);
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
    const listed = new Set([...states.values()].flatMap((s) => s?.copies ?? []));
    notInConfig(target, [...listed], clients, 'a copy lists it');
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
    await dest.query(`SELECT ${DIGEST_ALL}`);
    // Every held copy learns of the target, in the transaction that holds its writers back (see above).
    const holders = [...new Set([...listed, ...order.filter((s) => states.get(s)?.synced), target])].sort();
    for (const server of order) {
      if (states.get(server) === null) continue;
      await client(server).query(
        `UPDATE ${STATE_TABLE} SET copies = ARRAY(SELECT DISTINCT unnest(copies || $1::text[]) ORDER BY 1)`,
        [holders],
      );
    }
    await dest.query(`UPDATE ${STATE_TABLE} SET synced = true, synced_from = $1, changed_at = now()`, [from]);
    // The target first: a list that names it is never visible before its rows are.
    await dest.query('COMMIT');
    open.splice(open.indexOf(dest), 1);
    await Promise.all(open.map((c) => c.query('COMMIT')));
    open.length = 0;
    await recordCopies(config, client(config.catalog), holders);
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

/** Whether a server has the reference bookkeeping at all. */
async function hasCopy(client: pg.Client): Promise<boolean> {
  return ((await client.query(HAS_STATE_SQL)).rows[0] as { ok: boolean }).ok;
}

/** Refuses to fill while a copy lives on a server the fill cannot hold (not in its config). */
function notInConfig(
  target: string,
  copies: readonly string[],
  clients: ReadonlyMap<string, pg.Client>,
  why: string,
): void {
  const outside = copies.filter((s) => !clients.has(s));
  if (outside.length > 0)
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `server ${outside[0]} holds a copy of the reference tables (${why}) but is not in the config: add it, so that filling server ${target}'s copy can hold back its writers too`,
    );
}

import { createHash } from 'node:crypto';
import type pg from 'pg';
import { sqlStateOf } from '../errors/errors.js';
import type { RouterContext, SqlPrepare } from '../routing/context.js';

/**
 * router.sql's named statements: which calls send their pieces prepared, the statements each pooled connection
 * keeps, and the way back to unnamed statements behind a pooler that cannot carry named ones.
 *
 * Why: a piece of 64 shards costs its server 2.2–3.1 ms to parse, analyse, plan and lock unnamed, 0.30 ms as a
 * named statement planned once (scripts/sql-piece-cost.mjs); at 8,192 shards that is the difference between
 * 8.5× and 2.4× one table (docs/benchmarks.md). So by default (`sqlPrepare: 'auto'`) a query text the router has
 * run before sends its pieces as named statements, and a text seen once leaves nothing behind.
 *
 * What a connection keeps: at most `STATEMENTS_PER_CONNECTION` of them, least recently used out first with
 * `DEALLOCATE` (≈ 0.85 MB of backend memory per 64-shard piece's generic plan, measured: 88 MB with 64 held).
 *
 * A pooler in transaction mode that does not follow named statements across its server connections (PgBouncer
 * before 1.21, or with `max_prepared_statements = 0`) answers a statement parsed elsewhere with 26000 (it does not
 * exist) or 42P05 (it exists already). In 'auto', the first such answer turns named statements off for that server
 * for the router's life and runs the piece again unnamed — a SELECT, so running it twice changes nothing.
 * `prepare: true` (or `sqlPrepare: 'always'`) keeps them and reports the error.
 */
/** How one call sends its pieces: unnamed, named with the pooler fall-back, or named. */
export type PieceNaming = 'unnamed' | 'named-or-back' | 'named';

export const SQL_PREPARE_MODES: readonly SqlPrepare[] = ['auto', 'always', 'never'];

/** Most named statements of router.sql one pooled connection keeps (at 8,192 shards on 4 servers: 4 texts). */
export const STATEMENTS_PER_CONNECTION = 128;

/** The call's naming: its own `prepare`, else the router's setting ('auto': from a text's second call on). */
export function namingFor(
  prepare: boolean | undefined,
  setting: SqlPrepare,
  callsOfText: number,
): PieceNaming {
  if (prepare === true || (prepare === undefined && setting === 'always')) return 'named';
  if (prepare === false || setting === 'never' || callsOfText < 2) return 'unnamed';
  return 'named-or-back';
}

/** A piece's statement name: its text's hash, so one text is one name on every connection. */
export const statementName = (text: string): string =>
  `shardflake_sql_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`;

const unnamedServers = new WeakMap<RouterContext, Set<string>>();

/** Whether 'auto' has turned named statements off for `server` (a pooler answered 26000 or 42P05). */
export const namesOff = (ctx: RouterContext, server: string): boolean =>
  unnamedServers.get(ctx)?.has(server) === true;

/** A pooler's answer to a named statement it did not follow: not there (26000), or there already (42P05). */
export const poolerLostStatement = (error: unknown): boolean =>
  ['26000', '42P05'].includes(sqlStateOf(error) ?? '');

/**
 * A statement kept across DDL that changed the columns it returns: PostgreSQL's `cached plan must not change
 * result type`, told by its routine (the message may be translated, and 0A000 alone is any unsupported feature).
 */
export const planChangedShape = (error: unknown): boolean =>
  sqlStateOf(error) === '0A000' && (error as { routine?: unknown }).routine === 'RevalidateCachedQuery';

export function turnNamesOff(ctx: RouterContext, server: string): void {
  let set = unnamedServers.get(ctx);
  if (!set) {
    set = new Set();
    unnamedServers.set(ctx, set);
  }
  set.add(server);
}

/** Each connection's statement names, least recently used first (a Map keeps insertion order). */
const kept = new WeakMap<pg.ClientBase, Map<string, true>>();

/**
 * Makes room for `name` on `client` before it is sent: when the connection keeps the bound already and `name`
 * is not among them, the least recently used are deallocated (one round trip) and forgotten by pg.
 */
export async function makeRoom(client: pg.ClientBase, name: string): Promise<void> {
  const names = kept.get(client);
  if (!names || names.has(name) || names.size < STATEMENTS_PER_CONNECTION) return;
  const victims = [...names.keys()].slice(0, names.size - STATEMENTS_PER_CONNECTION + 1);
  for (const victim of victims) forgetName(client, victim);
  await client.query(victims.map((v) => `DEALLOCATE ${v}`).join('; '));
}

/**
 * Whether `client` holds `name`. A named piece's lease prefers such an idle connection, so each piece settles on
 * one of the server's connections: every statement is parsed and kept once per server rather than on each of the
 * `sqlConnectionsPerServer` connections that run the call's pieces.
 */
export const holds = (name: string) => (client: pg.ClientBase) => kept.get(client)?.has(name) === true;

/** Records that `client` holds `name`, now its most recently used. */
export function noteUsed(client: pg.ClientBase, name: string): void {
  let names = kept.get(client);
  if (!names) {
    names = new Map();
    kept.set(client, names);
  }
  names.delete(name);
  names.set(name, true);
}

/** Drops `name` from what `client` and pg believe the connection holds (the next use parses it again). */
export function forgetName(client: pg.ClientBase, name: string): void {
  kept.get(client)?.delete(name);
  // pg skips the Parse of a name it saw parsed on this connection; its record is not in its typings.
  const connection = (client as unknown as { connection?: { parsedStatements?: Record<string, string> } })
    .connection;
  if (connection?.parsedStatements) delete connection.parsedStatements[name];
}

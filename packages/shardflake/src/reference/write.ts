import type pg from 'pg';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import type { RouterContext } from '../routing/context.js';
import { traced } from '../telemetry/trace.js';
import { type CrossInternals, openCrossTransaction, type ServerSession } from '../transactions/cross.js';
import { refuseServerValues } from './deterministic.js';
import { BEGIN_WRITE, WRITTEN_DIGESTS_SQL } from './sql.js';

/**
 * `router.withReference(fn)`: writes the reference tables, the same statements on every copy, committed on every
 * server that holds one or on none.
 *
 * Which servers: every server that holds a copy, whatever config the router started with — the catalog's list
 * plus the servers that hold shards (servers.ts), plus what the copies themselves say, as follows.
 *
 * The race with a server gaining a copy (a move's fill, copy.ts), and why no write is lost to it. Each writer
 * takes its mark (`_shardflake_begin_write()`, sql.ts) on its servers one at a time, in server order, before any
 * statement; the mark holds ROW EXCLUSIVE on the copy's writers table and returns the copy's list of copies, read
 * by a statement that starts after the lock was granted (the transaction is READ COMMITTED whatever the server's
 * default, so that statement sees everything committed before the lock). The fill holds SHARE on the writers table
 * of every copy, in the same order, for its whole transaction, in which it copies the rows, adds the new copy to
 * every copy's list, and commits the new copy first. SHARE and ROW EXCLUSIVE conflict, and both sides lock in one
 * order, so on the servers both lock, either the writer's marks all come before the fill's locks, or the fill's
 * all come before the writer's marks:
 * - writer first: the fill waits for the writer to end on every server it marked (a prepared part holds its lock
 *   until COMMIT PREPARED), so the writer's rows are in the source the fill copies from;
 * - fill first: the writer's mark returns a list that names the new copy (committed before the lock was let go),
 *   so the writer — which has run no statement yet — rolls back and starts again with the new copy among its
 *   servers (it also remembers it until the catalog lists it). The new copy is synced by then: it committed first.
 * A new copy on a server this router cannot log in to fails the write (AUTH_FAILED naming the server and role, from
 * router/learned-server.ts): a write never commits on a subset of the copies.
 *
 * Commit: one cross-server transaction (transactions/cross.ts) with one participant per server, joined in server
 * order, so the first server is the "last agent" whose COMMIT carries the decision and the others are prepared
 * first: a failure anywhere before the decision (a statement, a deferred constraint, a PREPARE, a lost server)
 * rolls back every copy, and after it recovery commits every copy. One server needs no prepared transactions.
 * When a server's primary fails over before the decision, nothing committed anywhere and the whole call (fn
 * included) runs again on the new primary, within `writeRetryMs`; a connection lost while the decision commits is
 * COMMIT_UNKNOWN (never run again), settled by recovery.
 *
 * Order (why two writers never deadlock across servers): each statement runs first on the first server and, once
 * it has succeeded there, on the others side by side. A statement that takes a lock takes it first on the first
 * server, so two writers that want the same row or table meet and wait there, where PostgreSQL sees both and
 * breaks a real deadlock (40P01); on the other servers the one that got through first already holds what the
 * second would wait for, and cannot be waiting for the second there. Marks never wait for each other (ROW
 * EXCLUSIVE does not conflict with itself), and a fill or `cluster migrate` locks the servers in the same order.
 *
 * Values computed by the server (`now()`, `random()`, `nextval`, a column default that calls one) differ per
 * server: such a statement is refused before it runs anywhere (deterministic.ts, REFERENCE_NOT_DETERMINISTIC).
 *
 * Drift: each copy keeps a digest of each table's rows (sql.ts), to which every transaction that writes the table
 * adds its change. Before committing, the call applies its changes and reads the digests of every table it wrote,
 * on the first server and then on the others side by side: equal copies given the same statements have equal
 * digests; a copy that differed before the call (a write that missed it, a superuser's change) makes them
 * differ, and the call fails with REFERENCE_DRIFT and nothing commits. Each statement's row count is compared too, which names the statement at once. The digests are
 * exact, not a race: applying locks the table's digest row until the transaction ends (on the first server first,
 * in table-name order, so two writers meet there and never deadlock), and a write of another transaction reaches a
 * digest only through that lock, so none commits anywhere between the first server's read and the last's.
 * `cluster verify` compares the rows themselves.
 *
 * The guard (sql.ts): the mark is what lets a transaction write reference tables at all; shard sessions never take
 * it, so their writes are refused (SF020).
 */
export interface ReferenceSession {
  /** The servers written, in the order each statement reaches them. */
  readonly servers: readonly string[];
  /**
   * Runs a statement on every server's copy (reference tables by their unqualified names) and returns the first
   * server's result. Every copy must report the same row count, or the call fails with REFERENCE_DRIFT.
   */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/** Which servers a router writes (servers.ts), and what it learns from the copies. */
export interface ReferenceTargets {
  /** The servers to write now, in server order. */
  current(): Promise<string[]>;
  /** Servers a copy's list named that `current()` lacked: written from now on. */
  learn(servers: readonly string[]): void;
}

/** What a copy's mark returns (sql.ts begin_write); null from a copy whose SQL predates it. */
interface CopyState {
  copies: string[];
  synced: boolean;
}

/** A copy named servers this attempt does not write: it starts again with them, before fn ran. */
class NewCopies extends Error {
  constructor(readonly servers: string[]) {
    super(`copies on ${servers.join(', ')}`);
  }
}

/** How many times one call starts again because copies named servers it lacked (each adds at least one). */
const MAX_NEW_COPY_ROUNDS = 5;

/** An error of one server's statement, naming the server. */
function onServer(server: string, error: unknown): ShardflakeError {
  const e = wrapPgError(error);
  if (e.message.startsWith(`server ${server}`)) return e;
  return new ShardflakeError(e.code, `server ${server}: ${e.message}`, {
    sqlState: e.sqlState,
    detail: e.detail,
    cause: error,
  });
}

/** The mark; a server without the reference schema (3F000) or begin_write (42883) says so in one line. */
async function beginWrite(session: ServerSession): Promise<CopyState | null> {
  try {
    const { rows } = await session.query<{ state: unknown }>(`SELECT ${BEGIN_WRITE} AS state`);
    const state = rows[0]?.state;
    return state !== null && typeof state === 'object' ? (state as CopyState) : null;
  } catch (error) {
    const e = wrapPgError(error);
    if (e.sqlState === '3F000' || e.sqlState === '42883')
      throw new ShardflakeError(
        'REFERENCE_MISSING',
        `server ${session.server} has no reference tables; run shardflake cluster migrate (it creates and fills them)`,
        { sqlState: e.sqlState, cause: error },
      );
    throw onServer(session.server, error);
  }
}

export async function withReference<T>(
  ctx: RouterContext,
  targets: ReferenceTargets,
  fn: (session: ReferenceSession) => Promise<T> | T,
): Promise<T> {
  if (typeof fn !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'withReference needs a callback that receives the session');
  return traced(ctx.onEvent, 'withReference', async (trace) => {
    const { policy } = ctx;
    const deadline = performance.now() + policy.writeRetryMs;
    let backoff = policy.retryBackoffMs;
    for (let rounds = 0; ; ) {
      const servers = await targets.current();
      const tx = openCrossTransaction(ctx, { trace, readCommitted: true });
      try {
        return await attempt(tx, servers, fn);
      } catch (error) {
        await tx.rollback();
        if (error instanceof NewCopies && ++rounds <= MAX_NEW_COPY_ROUNDS) {
          targets.learn(error.servers);
          continue;
        }
        if (error instanceof NewCopies)
          throw new ShardflakeError(
            'REFERENCE_MISSING',
            `the copies of the reference tables kept naming servers this write did not know (${error.servers.join(', ')}) after ${MAX_NEW_COPY_ROUNDS} rounds; nothing was committed`,
          );
        // A primary that failed over before the decision: nothing committed anywhere, so all of it runs again.
        if (tx.outcome !== 'rolled-back' || !tx.nodeGone || performance.now() >= deadline) throw error;
        trace?.retryReasons.push('failover');
        await new Promise((resolve) => setTimeout(resolve, Math.min(backoff, 50)));
        backoff = Math.min(backoff * 2, policy.maxRetryBackoffMs);
      }
    }
  });
}

/** One attempt: marks in server order, fn, the digests compared, the commit (see the comment at the top). */
async function attempt<T>(
  tx: CrossInternals,
  servers: readonly string[],
  fn: (session: ReferenceSession) => Promise<T> | T,
): Promise<T> {
  // One server at a time, in server order: the marks' order (see above), the last agent first, and two writers
  // never each hold one server's last pooled connection while waiting for the other's.
  const joined: ServerSession[] = [];
  const states: (CopyState | null)[] = [];
  for (const server of servers) {
    const session = await tx.joinServer(server, [REFERENCE_SCHEMA]);
    joined.push(session);
    states.push(await beginWrite(session));
  }
  const named = [...new Set(states.flatMap((s) => s?.copies ?? []))];
  const unknown = named.filter((s) => !servers.includes(s)).sort();
  if (unknown.length > 0) throw new NewCopies(unknown);
  const unfilled = servers.filter((_, i) => states[i]?.synced === false);
  if (unfilled.length > 0)
    throw new ShardflakeError(
      'REFERENCE_MISSING',
      `server ${unfilled[0]}'s copy of the reference tables is not filled yet (a move fills it before its first shard moves there, or run shardflake cluster migrate); nothing was committed`,
    );
  const [first, ...rest] = joined as [ServerSession, ...ServerSession[]];
  let open = true;
  let failed: unknown;
  const session: ReferenceSession = {
    servers: [...servers],
    async query<R extends pg.QueryResultRow>(text: string, values?: unknown[]) {
      if (!open)
        throw new ShardflakeError(
          'SESSION_CLOSED',
          'this reference session has ended (its callback returned); use it only inside the callback',
        );
      if (failed !== undefined) throw failed;
      const run = (s: ServerSession) =>
        s.query<R>(text, values).catch((error: unknown) => {
          throw onServer(s.server, error);
        });
      try {
        await refuseServerValues(first, text);
        const result = await run(first);
        const others = await Promise.all(rest.map(run));
        const differ = others.findIndex((r) => r.rowCount !== result.rowCount);
        if (differ !== -1) {
          throw new ShardflakeError(
            'REFERENCE_DRIFT',
            `the reference copies differ: the statement changed ${result.rowCount} rows on server ${first.server} but ${others[differ]?.rowCount} on server ${rest[differ]?.server}; nothing was committed (run shardflake cluster verify)`,
          );
        }
        return result;
      } catch (error) {
        // A statement that failed on some servers must not commit on the others, even if fn catches the error.
        failed ??= error;
        throw error;
      }
    },
  };
  try {
    const result = await fn(session);
    open = false;
    if (failed !== undefined) throw failed;
    // Copies whose SQL predates the digests have none to compare (cluster migrate brings them up).
    if (rest.length > 0 && states.every((s) => s !== null)) await compareDigests(first, rest);
    await tx.commit();
    return result;
  } finally {
    open = false;
  }
}

/** The digests of every table this transaction wrote, equal on every server, or REFERENCE_DRIFT (see the top). */
async function compareDigests(first: ServerSession, rest: readonly ServerSession[]): Promise<void> {
  type Digest = { name: string; rows: string; digest: string };
  const read = (s: ServerSession) =>
    s.query<Digest>(WRITTEN_DIGESTS_SQL).then(
      (r) => new Map(r.rows.map((d) => [d.name, d])),
      (error: unknown) => {
        throw onServer(s.server, error);
      },
    );
  // The first server first: its digest rows are where two writers of one table meet (see the top).
  const base = await read(first);
  const others = await Promise.all(rest.map(read));
  others.forEach((mine, i) => {
    const server = rest[i]?.server;
    for (const name of [...new Set([...base.keys(), ...mine.keys()])].sort()) {
      const [a, b] = [base.get(name), mine.get(name)];
      if (a?.rows === b?.rows && a?.digest === b?.digest) continue;
      const shown = (d: Digest | undefined) =>
        d ? `${d.rows} rows (digest ${d.digest.slice(0, 12)})` : 'no digest';
      throw new ShardflakeError(
        'REFERENCE_DRIFT',
        `the reference copies differ: after this write, table ${name} holds ${shown(a)} on server ${first.server} and ${shown(b)} on server ${server}; nothing was committed (run shardflake cluster verify)`,
      );
    }
  });
}

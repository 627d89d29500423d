import type pg from 'pg';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import type { RouterContext } from '../routing/context.js';
import { traced } from '../telemetry/trace.js';
import { openCrossTransaction, type ServerSession } from '../transactions/cross.js';
import { refuseServerValues } from './deterministic.js';
import { BEGIN_WRITE } from './sql.js';

/**
 * `router.withReference(fn)`: writes the reference tables, the same statements on every server's copy, committed
 * on every server or none.
 *
 * Commit: one cross-server transaction (transactions/cross.ts) with one participant per server, joined in server
 * order (order.ts), so the first server is the "last agent" whose COMMIT carries the decision and the others are
 * prepared first: a failure anywhere before the decision (a statement, a deferred constraint, a PREPARE, a lost
 * server) rolls back every copy, and after it recovery commits every copy. One server needs no prepared
 * transactions at all.
 *
 * Order (why two writers never deadlock across servers): each statement runs first on the first server and, once
 * it has succeeded there, on the others side by side. A statement that takes a lock takes it first on the first
 * server, so two writers that want the same row or table meet and wait there, where PostgreSQL sees both and
 * breaks a real deadlock (40P01); on the other servers the one that got through first already holds what the
 * second would wait for, and cannot be waiting for the second there. A copy being filled (copy.ts) and `cluster
 * migrate` (install.ts) lock the servers in the same order.
 *
 * Values computed by the server (`now()`, `random()`, `nextval`, a column default that calls one) differ per
 * server: such a statement is refused before it runs anywhere (deterministic.ts, REFERENCE_NOT_DETERMINISTIC).
 * Drift: identical copies change as many rows for one statement. A different count means the copies differ already
 * (or a sequence moved apart): the call fails with REFERENCE_DRIFT and nothing commits. `cluster verify` compares
 * the copies themselves.
 *
 * The guard (sql.ts): each participant calls `_shardflake_begin_write()` first, which marks its transaction as a
 * reference write on that server; shard sessions never do, so their writes are refused (SF020).
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

/** The guard's mark; a server without the reference schema (3F000) or begin_write (42883) says so in one line. */
async function beginWrite(session: ServerSession): Promise<void> {
  try {
    await session.query(`SELECT ${BEGIN_WRITE}`);
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
  servers: readonly string[],
  fn: (session: ReferenceSession) => Promise<T> | T,
): Promise<T> {
  if (typeof fn !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'withReference needs a callback that receives the session');
  return traced(ctx.onEvent, 'withReference', async (trace) => {
    const tx = openCrossTransaction(ctx, { trace });
    let open = true;
    let failed: unknown;
    try {
      // One at a time, in server order: the first joined is the last agent, and two writers never each hold one
      // server's last pooled connection while waiting for the other's.
      const joined: ServerSession[] = [];
      for (const server of servers) joined.push(await tx.joinServer(server, [REFERENCE_SCHEMA]));
      await Promise.all(joined.map(beginWrite));
      const [first, ...rest] = joined as [ServerSession, ...ServerSession[]];
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
      const result = await fn(session);
      open = false;
      if (failed !== undefined) throw failed;
      await tx.commit();
      return result;
    } catch (error) {
      open = false;
      await tx.rollback();
      throw error;
    }
  });
}

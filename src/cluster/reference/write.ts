import type pg from 'pg';
import { isShardflakeError, ShardflakeError } from '../../errors.js';
import { wrapPgError } from '../../postgres/connect.js';
import { quoteIdent } from '../../postgres/identifier.js';
import type { RouterContext } from '../router/context.js';
import { acquireOn, isConnectionLost } from '../router/lease.js';
import type { NodeLease } from '../router/server-nodes.js';
import { BEGIN_WRITE, REFERENCE_SCHEMA } from './sql.js';

/**
 * `router.withReference(fn)`: writes the reference tables, the same statements on every server's copy.
 *
 * Order (why two writers never deadlock across servers): each statement runs first on the first server in server
 * order (order.ts), and only once it has succeeded there on the others, side by side. A statement that takes a
 * lock takes it first on the first server, so two writers that want the same row or table meet and wait there,
 * where PostgreSQL sees both and breaks a real deadlock; on the other servers the one that got through first
 * already holds what the second would wait for. A copy being filled (copy.ts) and `cluster migrate` lock the
 * servers in the same order.
 *
 * Drift: the copies are identical, so a statement changes as many rows on each. A different count means the copies
 * differ already (or the statement is not deterministic, e.g. `now()` or `random()` in a value): the call fails with
 * REFERENCE_DRIFT and nothing commits. `cluster verify` compares the copies themselves.
 *
 * Commit: every server or none. Until the cross-server commit (transactions/cross.ts) is merged here, this module
 * commits its own local transaction per server, in server order, after every statement succeeded everywhere: a
 * failing statement anywhere rolls back every server, but a crash or a lost connection between two COMMITs leaves
 * the earlier servers committed and the later ones not. TODO(tx): openCrossTransaction(ctx).joinServer per server,
 * whose commit is atomic across servers (2PC with the decision in Postgres).
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

interface Participant {
  server: string;
  lease: NodeLease;
  broken: unknown;
  onError: (error: unknown) => void;
}

const BEGIN = `BEGIN; SET LOCAL search_path TO ${quoteIdent(REFERENCE_SCHEMA, 'schema')}; SELECT ${BEGIN_WRITE}`;

/** A server without the reference schema (or an old one without begin_write) says so in one line. */
function missingOn(server: string, error: unknown): ShardflakeError | undefined {
  const code = (error as { code?: string }).code;
  if (code !== '3F000' && code !== '42883') return undefined;
  return new ShardflakeError(
    'REFERENCE_MISSING',
    `server ${server} has no reference tables; run shardflake cluster migrate (it creates and fills them)`,
    { sqlState: code, cause: error },
  );
}

function onServer(server: string, error: unknown, node?: string): ShardflakeError {
  if (isShardflakeError(error)) return error;
  const e = wrapPgError(error, node);
  return new ShardflakeError(e.code, `server ${server}: ${e.message}`, {
    sqlState: e.sqlState,
    detail: e.detail,
    cause: error,
  });
}

export async function withReference<T>(
  ctx: RouterContext,
  servers: readonly string[],
  fn: (session: ReferenceSession) => Promise<T> | T,
): Promise<T> {
  if (typeof fn !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'withReference needs a callback that receives the session');
  const participants: Participant[] = [];
  let open = true;
  let failed: unknown;
  const release = (p: Participant, error?: unknown) => {
    p.lease.client.removeListener('error', p.onError);
    p.lease.release(error);
  };
  try {
    for (const server of servers) {
      const lease = await acquireOn(ctx, server, { intent: 'write' });
      const p: Participant = { server, lease, broken: undefined, onError: () => {} };
      p.onError = (error: unknown) => {
        p.broken ??= error;
      };
      lease.client.on('error', p.onError);
      participants.push(p);
    }
    await Promise.all(
      participants.map(async (p) => {
        try {
          await p.lease.client.query(BEGIN);
        } catch (error) {
          throw missingOn(p.server, error) ?? onServer(p.server, error, p.lease.node);
        }
      }),
    );
    const [first, ...rest] = participants;
    const session: ReferenceSession = {
      servers: [...servers],
      async query<R extends pg.QueryResultRow>(text: string, values?: unknown[]) {
        if (!open)
          throw new ShardflakeError(
            'SESSION_CLOSED',
            'this reference session has ended (its callback returned); use it only inside the callback',
          );
        if (failed !== undefined) throw failed;
        const run = async (p: Participant) => {
          try {
            return await p.lease.client.query<R>(text, values);
          } catch (error) {
            throw onServer(p.server, error, p.lease.node);
          }
        };
        try {
          const result = await run(first as Participant);
          const others = await Promise.all(rest.map(run));
          const counts = others.map((r) => r.rowCount);
          const differ = others.findIndex((r) => r.rowCount !== result.rowCount);
          if (differ !== -1) {
            throw new ShardflakeError(
              'REFERENCE_DRIFT',
              `the reference copies differ: the statement changed ${result.rowCount} rows on server ${first?.server} but ${counts[differ]} on server ${rest[differ]?.server}; nothing was committed (run shardflake cluster verify)`,
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
    // TODO(tx): one atomic commit across servers (openCrossTransaction); here, local COMMITs in server order.
    // Deferred constraints are checked everywhere first, so the COMMITs below fail only if a server is lost.
    await Promise.all(
      participants.map((p) =>
        p.lease.client.query('SET CONSTRAINTS ALL IMMEDIATE').catch((error: unknown) => {
          throw onServer(p.server, error, p.lease.node);
        }),
      ),
    );
    const order = [...participants];
    for (const [i, p] of order.entries()) {
      try {
        const done = await p.lease.client.query('COMMIT');
        if (done.command === 'ROLLBACK') throw new ShardflakeError('DATABASE_ERROR', 'COMMIT rolled back');
      } catch (error) {
        const committed = order.slice(0, i).map((q) => q.server);
        const why = onServer(p.server, error, p.lease.node);
        throw new ShardflakeError(
          committed.length > 0 ? 'REFERENCE_DRIFT' : why.code,
          committed.length > 0
            ? `COMMIT failed on server ${p.server} after server ${committed.join(', ')} had committed: the copies differ until the write is repeated (${why.message})`
            : `COMMIT failed on server ${p.server}; nothing was committed (${why.message})`,
          { sqlState: why.sqlState, cause: error },
        );
      } finally {
        participants.splice(participants.indexOf(p), 1);
        release(p, p.broken ?? (isConnectionLost(undefined, p.lease.client) ? new Error('lost') : undefined));
      }
    }
    return result;
  } catch (error) {
    open = false;
    await Promise.all(
      participants.map(async (p) => {
        const lost =
          p.broken !== undefined ||
          isConnectionLost(undefined, p.lease.client) ||
          (await p.lease.client.query('ROLLBACK').then(
            () => false,
            () => true,
          ));
        release(p, lost ? (p.broken ?? error) : undefined);
      }),
    );
    throw error;
  }
}

import type pg from 'pg';
import { ShardflakeError } from '../errors/errors.js';
import { isConnectionLoss, loadPg, wrapPgError } from '../postgres/connect.js';
import type { AcquireOptions, NodeLease } from '../topology/nodes.js';
import type { RouterContext } from './context.js';

/**
 * Getting a connection from a server's nodes (for one shard: `options.shard`, which the lease counts as touched
 * and which picks a connection warm on it), and telling a lost connection from an error PostgreSQL reported on
 * a connection that still works (the difference decides whether a write may have committed).
 */
export async function acquireOn(
  ctx: RouterContext,
  server: string,
  options: AcquireOptions,
  /** From the commit pools (RouterContext.commitNodes), for a participant joined while committing. */
  committing = false,
): Promise<NodeLease> {
  try {
    const nodes = committing && ctx.commitNodes ? ctx.commitNodes(server) : ctx.nodes(server);
    const lease = await nodes.acquire(options);
    if (options.shard !== undefined) lease.touch(options.shard);
    return lease;
  } catch (error) {
    const wrapped = wrapPgError(error);
    // An error that already starts with its server (AUTH_FAILED from the login memory) is passed on as it is.
    if (wrapped.message.startsWith(`server ${server} `)) throw wrapped;
    throw new ShardflakeError(wrapped.code, `server ${server}: ${wrapped.message}`, {
      sqlState: wrapped.sqlState,
      detail: wrapped.detail,
      cause: error,
    });
  }
}

/**
 * A lost connection, as opposed to an error PostgreSQL reported on a connection that still works (the difference
 * decides whether a COMMIT in flight may have committed). Lost: the client says so itself (pg marks a client whose
 * connection failed or ended as no longer queryable), the server ended the session (a FATAL or PANIC error, class
 * 08), or the error is connection loss as the one mapping defines it (postgres/connect.ts `isConnectionLoss`).
 */
export function isConnectionLost(error: unknown, client?: pg.ClientBase): boolean {
  // pg's client state is not in its typings.
  const state = client as unknown as { _queryable?: boolean; _ending?: boolean } | undefined;
  if (state && (state._queryable === false || state._ending === true)) return true;
  // pg is loaded on first connect (connect.ts); an error from a client means it is loaded already.
  if (error instanceof loadPg().DatabaseError && (error.severity === 'FATAL' || error.severity === 'PANIC'))
    return true;
  return isConnectionLoss(error);
}

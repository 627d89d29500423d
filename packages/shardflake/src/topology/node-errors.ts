import { isConnectionLoss } from '../postgres/connect.js';

/**
 * What an error on a node says about the node. The router retries on another node only when the node is gone or
 * no longer the primary; every other error (a constraint, a syntax error, a serialization failure) is the
 * operation's own and says nothing about where it ran.
 *
 * Gone is connection loss, as the one mapping defines it (postgres/connect.ts `isConnectionLoss`: sockets, class
 * 08, 57P01–57P03, a connection that closed without a word); "no longer the primary" is a write refused as
 * read-only (25006), which a node that was demoted, or a replica the router took for the primary, answers.
 */
const READ_ONLY = '25006';

/**
 * True when `error` (or an error it wraps, through `cause`) says the node is gone or is not the primary.
 * ShardflakeErrors keep PostgreSQL's SQLSTATE in `sqlState`, pg errors in `code`.
 */
export function isNodeFailure(error: unknown): boolean {
  if (isConnectionLoss(error)) return true;
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    const { code, sqlState, cause } = e as { code?: unknown; sqlState?: unknown; cause?: unknown };
    if (sqlState === READ_ONLY || code === READ_ONLY) return true;
    e = cause;
  }
  return false;
}

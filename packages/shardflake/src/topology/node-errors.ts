/**
 * What an error on a node says about the node. The router retries on another node only when the node is gone or
 * no longer the primary; every other error (a constraint, a syntax error, a serialization failure) is the
 * operation's own and says nothing about where it ran.
 */

/** SQLSTATEs that mean the node went away or cannot take this work any more. */
const NODE_SQLSTATES = new Set([
  '57P01', // admin_shutdown: the server is shutting down (pg_ctl stop, a failover tool stopping the old primary)
  '57P02', // crash_shutdown: another backend crashed and the server restarts
  '57P03', // cannot_connect_now: starting up, shutting down, or in recovery without hot standby
  '25006', // read_only_sql_transaction: a write reached a node that is (now) a replica
  '08000', // connection_exception
  '08001', // sqlclient_unable_to_establish_sqlconnection
  '08003', // connection_does_not_exist
  '08004', // sqlserver_rejected_establishment_of_sqlconnection
  '08006', // connection_failure
]);

/** Socket errors that mean nothing answers at the node's address any more. */
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** node-postgres reports a dropped connection without a code, only with these messages. */
const DROPPED =
  /Connection terminated|connection error and is not queryable|timeout expired|Client was closed/i;

/**
 * True when `error` (or an error it wraps, through `cause`) says the node is gone or is not the primary.
 * ShardflakeErrors keep PostgreSQL's SQLSTATE in `sqlState`, pg errors in `code`.
 */
export function isNodeFailure(error: unknown): boolean {
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    const { code, sqlState, message, cause } = e as {
      code?: unknown;
      sqlState?: unknown;
      message?: unknown;
      cause?: unknown;
    };
    if (typeof sqlState === 'string' && NODE_SQLSTATES.has(sqlState)) return true;
    if (typeof code === 'string' && (NODE_SQLSTATES.has(code) || SOCKET_CODES.has(code))) return true;
    if (typeof message === 'string' && DROPPED.test(message)) return true;
    e = cause;
  }
  return false;
}

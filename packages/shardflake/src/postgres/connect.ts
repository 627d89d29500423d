/*
 * postgres/: Talking to one PostgreSQL server: connections and pools with ids as bigint (connect.ts), pipelined
 * batches, COPY streams, identifier quoting, and the `next_id()` generator SQL with its installer. Knows nothing
 * of clusters.
 *
 * May import: errors, ids.
 */
import { createRequire } from 'node:module';
import type pg from 'pg';
import { expectString } from '../errors/arguments.js';
import { redactSecrets, ShardflakeError } from '../errors/errors.js';
import { describeServerUrl } from '../errors/redact.js';

/**
 * Connections with ids as `bigint` end to end. `pg` returns int8 as a string by default; shardflake maps it to
 * BigInt here, once, on its own type set so the application's global `pg.types` stay untouched.
 */
const INT8_OID = 20;
const INT8_ARRAY_OID = 1016;

/**
 * pg, loaded on first connect: it takes ≈ 35 ms to import, which an application that only makes ids, or a CLI
 * command that never connects, should not pay. pg is CommonJS, so a synchronous require keeps createPool
 * synchronous (and gives the same instance as `import pg from 'pg'`).
 */
let pgModule: typeof pg | undefined;
export function loadPg(): typeof pg {
  pgModule ??= createRequire(import.meta.url)('pg') as typeof pg;
  return pgModule;
}

// pg's typings only accept its builtin OID enum; shardflake passes whatever OID the server sends.
const defaultParser = (oid: number, format: string) =>
  (loadPg().types.getTypeParser as (oid: number, format: string) => (value: string) => unknown)(oid, format);

export const bigintTypes = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID) return (value: string) => BigInt(value);
    if (oid === INT8_ARRAY_OID) {
      const parseArray = defaultParser(oid, 'text') as (v: string) => (string | null)[];
      return (value: string) => parseArray(value).map((v) => (v === null ? null : BigInt(v)));
    }
    return defaultParser(oid, format ?? 'text');
  },
};

/** Anything with pg's `query`: a client, a pool, or a pool client. */
export type Queryable = Pick<pg.ClientBase, 'query'>;

/** A connection to each named server's primary, for work that visits every server (recovery, verify checks). */
export interface ServerAccess {
  readonly servers: readonly string[];
  /** Runs `fn` on a connection to the server's primary (autocommit), giving the connection back after. */
  use<T>(server: string, fn: (client: Queryable) => Promise<T>): Promise<T>;
}

/** Where a URL points, without its password: `postgres://postgres:****@127.0.0.1:5432/app`. */
export function describeUrl(url: string): string {
  return describeServerUrl(expectString(url, 'a server URL'));
}

/**
 * Connection loss, in one place: what every error mapping, retry rule and node check of shardflake asks before it
 * decides anything. An error is a lost (or refused) connection when it, or an error it wraps through `cause`, is
 * - a socket failure (ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, ENOTFOUND, EAI_AGAIN);
 * - a server ending the session or refusing new ones: SQLSTATE class 08 (connection exception), 57P01 (admin
 *   shutdown: `pg_ctl stop`, `pg_terminate_backend`, a failover tool stopping the old primary), 57P02 (another
 *   backend crashed and the server restarts), 57P03 (starting up, shutting down, or a standby that takes no
 *   connections);
 * - node-postgres's words for a socket that closed without a message ("Connection terminated unexpectedly", a
 *   backend killed -9 or a server stopped in immediate mode), a client used after that ("… is not queryable",
 *   "Client was closed"), and a connect that timed out ("timeout expired", "… due to connection timeout");
 * - a ShardflakeError that is SERVER_UNREACHABLE already.
 * Errors PostgreSQL reports on a session that goes on (a constraint, a deadlock, a lock timeout, a read-only
 * transaction) are not: they are the statement's own.
 */
export function isConnectionLoss(error: unknown): boolean {
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    const { code, sqlState, message, cause } = e as {
      code?: unknown;
      sqlState?: unknown;
      message?: unknown;
      cause?: unknown;
    };
    if (e instanceof ShardflakeError) {
      if (code === 'SERVER_UNREACHABLE') return true;
      if (typeof sqlState === 'string' && lostState(sqlState)) return true;
    } else if (typeof code === 'string' && (SOCKET_CODES.has(code) || lostState(code))) return true;
    if (typeof message === 'string' && DROPPED.test(message)) return true;
    e = cause;
  }
  return false;
}

/** Socket errors: nothing answers at the address any more (or never did). */
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** SQLSTATEs of a session the server ended, or of a connection it would not take (see isConnectionLoss). */
const lostState = (state: string) => state.startsWith('08') || /^57P0[123]$/.test(state);

/** node-postgres's messages for a connection that went away without a SQLSTATE, or never came. */
const DROPPED =
  /Connection terminated|connection error and is not queryable|Client was closed and is not queryable|^timeout expired$|due to connection timeout/i;

/** Why a lost connection was lost, in a few words for its message. */
function lossReason(error: unknown): string {
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    const { code, message, cause } = e as { code?: unknown; message?: unknown; cause?: unknown };
    if (typeof code === 'string' && SOCKET_CODES.has(code)) return code;
    if (typeof message === 'string' && /^timeout expired$|due to connection timeout/.test(message))
      return 'no connection within the connect timeout';
    if (typeof code === 'string' && lostState(code) && typeof message === 'string')
      return `the server ended the session: ${redactSecrets(message)}`;
    if (typeof message === 'string' && DROPPED.test(message))
      return `the connection was lost: ${redactSecrets(message)}`;
    e = cause;
  }
  return 'the connection was lost';
}

/**
 * The one mapping of a driver error to shardflake's codes: connection loss (isConnectionLoss) is
 * SERVER_UNREACHABLE, whatever step it broke; an error the server reported on a working session is
 * DATABASE_ERROR (or REFERENCE_READ_ONLY for the reference tables' guard), keeping SQLSTATE and DETAIL. A
 * ShardflakeError is returned as it is.
 */
export function wrapPgError(error: unknown, url?: string): ShardflakeError {
  if (error instanceof ShardflakeError) return error;
  const e = error as { code?: string; message?: string; detail?: string };
  const where = url ? ` at ${describeUrl(url)}` : '';
  const state =
    typeof e?.code === 'string' && !SOCKET_CODES.has(e.code) && /^[0-9A-Z]{5}$/.test(e.code)
      ? e.code
      : undefined;
  if (isConnectionLoss(error)) {
    return new ShardflakeError(
      'SERVER_UNREACHABLE',
      `PostgreSQL server${where} is unreachable (${lossReason(error)})`,
      {
        sqlState: state,
        cause: error,
      },
    );
  }
  const message = redactSecrets(String(e?.message ?? error));
  // SF020: the write guard of the reference tables (reference/sql.ts) refused a write outside withReference.
  const code = e?.code === 'SF020' ? 'REFERENCE_READ_ONLY' : 'DATABASE_ERROR';
  return new ShardflakeError(code, `PostgreSQL${where}: ${message}`, {
    sqlState: e?.code,
    detail: e?.detail,
    cause: error,
  });
}

/**
 * Options of `connect` and `createPool`: how long to wait for the server, the pool size and the application name.
 */
export interface ConnectOptions {
  /** Milliseconds to wait for the server before SERVER_UNREACHABLE (default 5000). */
  connectTimeoutMs?: number;
  /** Pool size (default 10). */
  max?: number;
  /** Set as `application_name`, visible in pg_stat_activity. */
  applicationName?: string;
  /** Pools only: close a connection after this many checkouts (default: never). */
  maxUses?: number;
  /** Pools only: close a connection this many seconds after it opened (default: never). */
  maxLifetimeSeconds?: number;
}

/** One connected client with int8 → bigint. Connection failures throw SERVER_UNREACHABLE. */
export async function connect(url: string, options: ConnectOptions = {}): Promise<pg.Client> {
  const client = new (loadPg().Client)({
    connectionString: url,
    types: bigintTypes,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
    application_name: options.applicationName ?? 'shardflake',
  });
  // An idle client whose server goes away emits 'error'; without a listener Node would crash the process.
  client.on('error', () => {});
  try {
    await client.connect();
  } catch (error) {
    await client.end().catch(() => {});
    throw wrapPgError(error, url);
  }
  return client;
}

/** A pool with int8 → bigint. */
export function createPool(url: string, options: ConnectOptions = {}): pg.Pool {
  const pool = new (loadPg().Pool)({
    connectionString: url,
    types: bigintTypes,
    max: options.max ?? 10,
    maxUses: options.maxUses || Number.POSITIVE_INFINITY,
    maxLifetimeSeconds: options.maxLifetimeSeconds ?? 0,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
    application_name: options.applicationName ?? 'shardflake',
  });
  pool.on('error', () => {});
  return pool;
}

/**
 * A client from `pool`. pg-pool words a wait behind busy connections as "timeout exceeded when trying to connect";
 * it is POOL_TIMEOUT here, saying how to fix it, since neither the server nor the statement is at fault (a new
 * connection the server does not accept in time is "Connection terminated due to connection timeout", which
 * wrapPgError makes SERVER_UNREACHABLE).
 */
export async function checkout(pool: pg.Pool): Promise<pg.PoolClient> {
  try {
    return await pool.connect();
  } catch (error) {
    if (!/timeout exceeded when trying to connect/.test(String((error as Error)?.message))) throw error;
    throw new ShardflakeError(
      'POOL_TIMEOUT',
      `no connection of the pool came free within ${pool.options.connectionTimeoutMillis} ms: all ${pool.options.max} stayed busy (raise the router's poolSize or connectTimeoutMs, or hold connections for less time)`,
      { cause: error },
    );
  }
}

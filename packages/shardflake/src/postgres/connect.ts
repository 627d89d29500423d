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
import { AuthFailedError, describeServerUrl, redactSecrets, ShardflakeError } from '../errors/errors.js';
import { ID_CHECK_CONSTRAINT } from './id-shard-rule.js';

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

/** Where a server's password belongs, for every message about a refused login. */
export const PASSWORD_HINT = `give the role's password in the config's URL as \${VAR} (an environment variable), in PGPASSWORD or in the pgpass file (docs/security.md)`;

/**
 * Why the server (or node-postgres, before answering it) refused a login, in words that hold no secret and no
 * SCRAM exchange; undefined when `error` is not a refused login. SQLSTATE 28P01 is a wrong password, 28000 a login
 * pg_hba.conf or the role does not allow (the server's own sentence, which names host, role and database); without
 * a password node-postgres gives up on the SCRAM exchange itself ("client password must be a string").
 */
export function loginRefusal(error: unknown): string | undefined {
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 5; depth++) {
    const { code, sqlState, message, cause } = e as {
      code?: unknown;
      sqlState?: unknown;
      message?: unknown;
      cause?: unknown;
    };
    if (e instanceof AuthFailedError) return e.reason;
    const state = typeof sqlState === 'string' ? sqlState : code;
    const text = typeof message === 'string' ? message : '';
    if (state === '28P01') return 'password authentication failed';
    if (state === '28000') return redactSecrets(text);
    if (/password must be a string/i.test(text)) return 'no password given';
    if (/^SASL:/.test(text)) return "the server's SCRAM answer did not verify";
    e = cause;
  }
  return undefined;
}

/** The role a URL logs in as: its user, else PGUSER, else the OS user (node-postgres' defaults). */
export function roleOf(url: string | undefined): string {
  let user = '';
  try {
    user = url ? decodeURIComponent(new URL(url).username) : '';
  } catch {
    // a URL that does not parse names no role; the defaults below are what node-postgres would use
  }
  return user || process.env.PGUSER || process.env.USER || process.env.USERNAME || '(unknown)';
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
 * The one mapping of a driver error to shardflake's codes: a refused login (loginRefusal) is AUTH_FAILED;
 * connection loss (isConnectionLoss) is SERVER_UNREACHABLE, whatever step it broke; an error the server reported
 * on a working session is
 * DATABASE_ERROR (or REFERENCE_READ_ONLY for the reference tables' guard), keeping SQLSTATE and DETAIL. A
 * ShardflakeError is returned as it is.
 */
export function wrapPgError(error: unknown, url?: string): ShardflakeError {
  if (error instanceof ShardflakeError) return error;
  const e = error as { code?: string; message?: string; detail?: string };
  const where = url ? ` at ${describeUrl(url)}` : '';
  const refusal = loginRefusal(error);
  if (refusal !== undefined) {
    const role = roleOf(url);
    return new AuthFailedError(
      `PostgreSQL${where} refused the login of role ${role} (${refusal}); ${PASSWORD_HINT}`,
      { role, reason: refusal, hint: PASSWORD_HINT, sqlState: sqlStateOfLogin(e.code), cause: error },
    );
  }
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
  // The id rule (id-shard-rule.ts): a row whose id names another shard than the one it is written in.
  const violated = error as { constraint?: string; table?: string };
  if (e?.code === '23514' && violated.constraint === ID_CHECK_CONSTRAINT) {
    return new ShardflakeError(
      'ID_WRONG_SHARD',
      `PostgreSQL${where}: a row of table ${violated.table ?? '?'} has an id whose bits name another shard than the one it is written in, where get, lookups and verify would never find it; let next_id() make the id, or write the row in the shard its id names (router.shardOfId(id)) (docs/lookups.md)`,
      { sqlState: e.code, detail: e.detail, cause: error },
    );
  }
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

const sqlStateOfLogin = (code: string | undefined) =>
  code === '28P01' || code === '28000' ? code : undefined;

/**
 * node-postgres' Client, except that a connect that fails closes its socket at once. When node-postgres itself
 * gives up during authentication (no password to answer SCRAM with), it reports the error but leaves the socket
 * open, and pg-pool never ends a client that failed to connect: the server keeps that backend, counted against
 * max_connections, until its authentication_timeout (60 s). A router that dialled on every operation filled a
 * server that way (issue 32).
 */
let closingClient: typeof pg.Client | undefined;
function closingClientClass(): typeof pg.Client {
  if (closingClient) return closingClient;
  const Base = loadPg().Client;
  const close = (client: pg.Client) =>
    (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
  class ClosingClient extends Base {
    constructor(config: pg.ClientConfig) {
      super(config);
      // No password in the URL, the config or PGPASSWORD: node-postgres would read the pgpass file itself, and
      // print a DeprecationWarning in the host's process when it finds one there (its pgpass support goes in
      // pg 9). The same lookup, done here: a password function is node-postgres' supported way.
      const self = this as unknown as { password: unknown };
      if (self.password === null || self.password === undefined) self.password = passwordFromPgpass;
    }

    // pg-pool connects with a callback, applications with the promise: both close the socket on failure.
    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error | null, client?: pg.Client) => void): void;
    override connect(
      callback?: (err: Error | null, client?: pg.Client) => void,
    ): Promise<pg.Client> | undefined {
      if (callback) {
        super.connect((error: Error | null) => {
          if (error) close(this);
          callback(error, this);
        });
        return undefined;
      }
      return super.connect().catch((error: unknown) => {
        close(this);
        throw error;
      });
    }
  }
  closingClient = ClosingClient;
  return closingClient;
}

type PgpassLookup = (connection: unknown, found: (password: string | undefined) => void) => void;
let pgpassLookup: PgpassLookup | undefined;

/**
 * The password of the pgpass file (PGPASSFILE, else ~/.pgpass; libpq's rules: the file's mode, host, port,
 * database and user matched, `*` as any) for a connection's parameters, or undefined, found with the `pgpass`
 * module node-postgres itself used. Loaded on the first connection that needs it.
 */
function passwordFromPgpass(parameters: unknown): Promise<string | undefined> {
  if (!pgpassLookup) {
    const require = createRequire(import.meta.url);
    pgpassLookup = require('pgpass') as PgpassLookup;
  }
  const lookup = pgpassLookup;
  return new Promise((resolve) => lookup(parameters, resolve));
}

/** One connected client with int8 → bigint. Connection failures throw SERVER_UNREACHABLE. */
export async function connect(url: string, options: ConnectOptions = {}): Promise<pg.Client> {
  const client = new (closingClientClass())({
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
    Client: closingClientClass(),
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

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
import { describeServerUrl, redactSecrets, ShardflakeError } from '../errors/errors.js';

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

/** Turns a connection failure into SERVER_UNREACHABLE and a server error into DATABASE_ERROR (keeping SQLSTATE). */
export function wrapPgError(error: unknown, url?: string): ShardflakeError {
  if (error instanceof ShardflakeError) return error;
  const e = error as { code?: string; message?: string; detail?: string };
  const where = url ? ` at ${describeUrl(url)}` : '';
  const networkCodes = ['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'ECONNRESET', 'EHOSTUNREACH', '57P03'];
  if (e?.code && networkCodes.includes(e.code)) {
    return new ShardflakeError('SERVER_UNREACHABLE', `PostgreSQL server${where} is unreachable (${e.code})`, {
      cause: error,
    });
  }
  // pg's and pg-pool's words for a new connection the server did not accept within connectionTimeoutMillis.
  if (/^timeout expired$|due to connection timeout/.test(String(e?.message))) {
    return new ShardflakeError(
      'SERVER_UNREACHABLE',
      `PostgreSQL server${where} is unreachable (no connection within the connect timeout)`,
      { cause: error },
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

/*
 * errors/: What every other folder may throw and check with: the one error type (ShardflakeError and its codes),
 * the argument checks that turn a wrong value into a typed INVALID_ARGUMENT (arguments.ts), and the redaction that
 * keeps passwords out of every message (redact.ts).
 *
 * May import: nothing of the library.
 */
import { redactText } from './redact.js';

/**
 * The one error type shardflake throws at its public boundary. Every error carries a stable string `code`
 * (listed in ERROR_CODES and in the error table of docs/errors.md) and one clear sentence as its message. The CLI prints
 * `error [CODE]: message` on one line and exits non-zero; stacks appear only with `--debug`.
 */
export const ERROR_CODES = [
  // id formats
  'INVALID_LAYOUT', // a layout definition that cannot work (missing time field, zero-width field, …)
  'LAYOUT_TOO_WIDE', // a layout whose fields add up to more than 64 bits
  'OUT_OF_RANGE', // a shard, worker, sequence or time that does not fit its field
  'INVALID_ID', // a string or number that is not an id of the expected format
  'CLOCK_EXHAUSTED', // the layout's time field has run out at this clock reading
  'INVALID_ARGUMENT', // any other bad option or flag value
  // postgres
  'INVALID_IDENTIFIER', // a schema/table name that is not a plain SQL identifier
  'SERVER_UNREACHABLE', // a PostgreSQL server that does not answer
  'AUTH_FAILED', // a server refused the login (wrong or missing password, no pg_hba entry): names the server, the role and where the password belongs
  'POOL_TIMEOUT', // no pooled connection to a server came free within the wait: every one stayed busy (raise poolSize)
  'DATABASE_ERROR', // PostgreSQL refused a statement; `detail` keeps the server's own fields
  'ID_WRONG_SHARD', // a row written with an id whose bits name another shard (the id rule's CHECK constraint refused it)
  // cluster
  'INVALID_CONFIG', // a cluster config file that is not valid
  'UNKNOWN_SERVER', // a server name the config does not define
  'UNKNOWN_SHARD', // a logical shard number outside the cluster
  'STALE_MAP', // a router's shard map is older than the catalog's
  'SHARD_FENCED', // a write reached a copy of a shard that was moved away
  'SHARD_BUSY', // a shard that is being moved (or migrated) by someone else
  'MIGRATION_FAILED', // a migration step that failed on one or more shards
  'LEASE_LOST', // a worker-id lease that expired or was taken over
  'NO_FREE_WORKER', // every worker id of a layout is leased
  'MOVE_FAILED', // an online shard move that stopped; the shard stays where it was
  'COMMIT_UNKNOWN', // the connection was lost while COMMIT was in flight: the transaction may or may not have committed
  'SESSION_CLOSED', // a shard session used after its callback returned
  'NOT_SUPPORTED', // a feature the target cannot provide
  'PREPARED_TRANSACTIONS_DISABLED', // a server a cross-server transaction needs has max_prepared_transactions = 0
  'TRANSACTION_ABORTED', // a cross-server transaction rolled back at commit (recovery took it for abandoned, or a PREPARE failed)
  'DEADLOCK', // a transaction across shards chosen to break a deadlock across servers (sqlState 40P01); nothing of it committed
  'LOCK_TIMEOUT', // a statement of a transaction across shards waited for a lock longer than its lockTimeoutMs (sqlState 55P03)
  'IDLE_TIMEOUT', // a transaction across shards sat idle on a server longer than its idleTimeoutMs, and the server ended it (sqlState 25P03)
  'NO_PRIMARY', // no node of a server is its primary (a failover not finished within the wait, or none configured)
  'UNSUPPORTED_QUERY', // a query router.sql cannot answer exactly across shards (it says what); nothing was run
  'REFERENCE_READ_ONLY', // a write to a reference table outside router.withReference (e.g. inside a shard session)
  'REFERENCE_DRIFT', // the copies of a reference table differ between servers (their contents, compared by withReference before every commit)
  'REFERENCE_MISSING', // a server without a complete copy of the reference tables (run cluster migrate)
  'REFERENCE_NOT_DETERMINISTIC', // a withReference statement whose values would differ per server (now(), random(), nextval, …): it names the function; nothing was run
  // lookups
  'UNIQUE_VIOLATION', // a value a unique lookup already holds for another row (the message names the lookup, never the value)
  'LOOKUP_NOT_READY', // a lookup that `cluster migrate` has not built yet (or an unknown lookup name)
  // backups
  'RESTORE_POINT_EXISTS', // a restore point name the cluster has used before (names are never reused)
  'RESTORE_POINT_FAILED', // a restore point that was not written on every server (the message says where it was, and not to restore to it)
  'RESTORE_FAILED', // a shard's rows copied from a restored server do not match the restored copy (nothing was kept)
  'INSUFFICIENT_PRIVILEGE', // the role a command runs as lacks a privilege it needs (docs/security.md), or a schema shardflake uses is another role's
  'MISSING_PACKAGE', // an optional package a feature needs is not installed (the message says what to install)
  // adoption
  'ADOPT_REFUSED', // adopt plan or run cannot take the source as it is (the message names each table or setting and what to do)
  'ADOPT_FAILED', // an adoption run stopped (the message says why); a rerun resumes it, adopt abort undoes it before the cutover
] as const;

/** The stable code of a `ShardflakeError`, one of `ERROR_CODES`; docs/errors.md says what each means. */
export type ErrorCode = (typeof ERROR_CODES)[number];

/**
 * What a `ShardflakeError` keeps besides its code and message: the server's SQLSTATE and DETAIL, and the error it
 * wraps.
 */
export interface ErrorDetails {
  /** PostgreSQL's SQLSTATE when the error came from the server. */
  sqlState?: string;
  /** PostgreSQL's DETAIL, or another short fact that helps the caller. */
  detail?: string;
  /** The error this one wraps. */
  cause?: unknown;
}

/**
 * The one error class of shardflake: a stable `code`, one sentence as the message (never a password or an SQL
 * parameter), and PostgreSQL's `sqlState` and `detail` when the server raised it. Test the code with
 * `isShardflakeError(error, code)`.
 */
export class ShardflakeError extends Error {
  /** Always `'ShardflakeError'`, so logs and `error.name` checks tell it from pg's and Node's own errors. */
  override readonly name = 'ShardflakeError';
  /**
   * The stable reason, one of `ERROR_CODES`; branch on this (or `isShardflakeError`), never on the message.
   */
  readonly code: ErrorCode;
  /** PostgreSQL's five-character SQLSTATE when the server raised the error, otherwise undefined. */
  readonly sqlState: string | undefined;
  /** PostgreSQL's DETAIL line (or another short fact that helps), undefined when there is none. */
  readonly detail: string | undefined;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.code = code;
    this.sqlState = details.sqlState;
    this.detail = details.detail;
  }
}

/**
 * AUTH_FAILED: a server refused the login. Besides the message (which names the server, the role, the reason and
 * where the password belongs) it keeps those facts as fields; never the password, never the SCRAM exchange.
 */
export class AuthFailedError extends ShardflakeError {
  /** The configured (or learned) server's name, when the refusal was met through one; undefined otherwise. */
  readonly server: string | undefined;
  /** The role the login was for. */
  readonly role: string;
  /** Why it was refused: `password authentication failed`, `no password given`, or the server's pg_hba sentence. */
  readonly reason: string;
  /** Where the password belongs. */
  readonly hint: string;

  constructor(
    message: string,
    facts: {
      server?: string;
      role: string;
      reason: string;
      hint: string;
      sqlState?: string;
      detail?: string;
      cause?: unknown;
    },
  ) {
    super('AUTH_FAILED', message, { sqlState: facts.sqlState, detail: facts.detail, cause: facts.cause });
    this.server = facts.server;
    this.role = facts.role;
    this.reason = facts.reason;
    this.hint = facts.hint;
  }
}

/** True when `error` is a `ShardflakeError`, and, when a code is given, one with that code; narrows the type. */
export function isShardflakeError(error: unknown, code?: ErrorCode): error is ShardflakeError {
  return error instanceof ShardflakeError && (code === undefined || error.code === code);
}

/**
 * The SQLSTATE of an error, whatever raised it: a ShardflakeError (`sqlState`), pg's DatabaseError (`code`, as
 * Kysely passes it on), Drizzle's query error (the pg error is its `cause`), or any wrapper whose `cause` chain
 * leads to one. Undefined when no SQLSTATE is found. The one way to ask "which database error was it?".
 */
export function sqlStateOf(error: unknown): string | undefined {
  let e = error as { sqlState?: unknown; code?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    if (typeof e.sqlState === 'string') return e.sqlState;
    if (typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return e.code;
    e = e.cause as typeof e;
  }
  return undefined;
}

/**
 * The database error a query client threw, if `error` is one: pg's DatabaseError itself (pg, Kysely) or Drizzle's
 * DrizzleQueryError around one. Other errors (the application's own, even with a database error as their cause)
 * are not: they are the application's to shape.
 */
export function driverDatabaseError(
  error: unknown,
): { code: string; message: string; detail?: string } | undefined {
  const isPgError = (e: unknown): e is { code: string; message: string; detail?: string } => {
    const x = e as { code?: unknown; severity?: unknown } | null;
    return (
      e instanceof Error &&
      typeof x?.code === 'string' &&
      /^[0-9A-Z]{5}$/.test(x.code) &&
      typeof x.severity === 'string'
    );
  };
  if (isPgError(error)) return error;
  // Drizzle's DrizzleQueryError keeps the name 'Error'; it is known by its class name or its query and params.
  const drizzle = error as { query?: unknown; params?: unknown } | null;
  const isDrizzle =
    error instanceof Error &&
    (error.constructor.name === 'DrizzleQueryError' ||
      (typeof drizzle?.query === 'string' && Array.isArray(drizzle.params)));
  if (isDrizzle && isPgError(error.cause)) return error.cause;
  return undefined;
}

/**
 * Replaces every password inside `text` — in URLs (any form, `?password=` too) and key=value connection strings —
 * so that no message ever shows a secret (redact.ts parses them).
 */
export function redactSecrets(text: string): string {
  // A message built from anything but text has no URL to redact (and String() could throw): said as such.
  if (typeof text !== 'string') return `(not text: ${text === null ? 'null' : typeof text})`;
  return redactText(text);
}

/*
 * errors/: What every other folder may throw and check with: the one error type (ShardflakeError and its codes),
 * the argument checks that turn a wrong value into a typed INVALID_ARGUMENT (arguments.ts), and the redaction that
 * keeps passwords out of every message (at the end of this file: one module with the error type rather than one of
 * its own, because `shardflake/ids` loads this one, and each module it loads costs its import ≈ 0.5 ms).
 *
 * May import: nothing of the library.
 */

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
 * so that no message ever shows a secret (`redactText` below parses them).
 */
export function redactSecrets(text: string): string {
  // A message built from anything but text has no URL to redact (and String() could throw): said as such.
  if (typeof text !== 'string') return `(not text: ${text === null ? 'null' : typeof text})`;
  return redactText(text);
}

// Redaction.

/**
 * Passwords out of anything shardflake prints: messages, URLs, connection strings. Redaction parses rather than
 * pattern-matches one shape, because the shapes that leak are the unusual ones:
 *
 * - URLs (`postgres://user:secret@host/db`), including passwords that contain `/`, `@`, `:` or `?` unencoded
 *   (malformed, but typed by people): the userinfo runs to the last `@` of the URL's token, so everything between
 *   the first `:` after `//` and that `@` is masked. A URL whose userinfo holds no `:` has no password to mask.
 * - Query parameters `?password=…`, `&sslpassword=…` (libpq accepts every keyword there).
 * - key=value connection strings (`host=h password=secret`, `password = 'it''s quoted'`, `PGPASSWORD=…`).
 *
 * Over-masking is the safe side: an odd URL may lose a little more than its password, never keep it.
 */
const MASK = '****';

/** Keywords whose value is a secret (libpq's `password`, `sslpassword`; the environment's `PGPASSWORD`). */
const SECRET_KEY = /^(?:pg|ssl)?password$/i;

/**
 * A URL's token: a scheme, `//`, then everything up to whitespace. Quotes and brackets stay in the token (a raw
 * password may hold them; a closing quote after the URL costs nothing), so the userinfo's last `@` is found.
 */
const URL_TOKEN = /\b[a-z][a-z0-9+.-]*:\/\/\S*/gi;

/** A secret keyword outside URLs and its `=`; its value is read by `valueEnd`. */
const SECRET_ASSIGNMENT = /\b(?:pg|ssl)?password\s*=\s*/gi;

/**
 * Where a key=value secret starting at `start` ends. An unquoted value runs to whitespace. A quoted one is read
 * both as libpq reads it (`\'` escapes a quote) and as SQL does (a backslash is itself, `''` is a quote), and the
 * longer reading wins: the value may hold spaces, quotes and what looks like the next `key=`, and masking a little
 * more than the password is the safe side. Without a closing quote, the value runs to the end of the line.
 */
function valueEnd(text: string, start: number): number {
  const quote = text[start];
  if (quote !== "'" && quote !== '"') {
    const space = text.slice(start).search(/\s/);
    return space === -1 ? text.length : start + space;
  }
  return Math.max(quotedEnd(text, start, quote, true), quotedEnd(text, start, quote, false));
}

function quotedEnd(text: string, start: number, quote: string, backslashEscapes: boolean): number {
  for (let i = start + 1; i < text.length; i++) {
    const c = text[i];
    if (c === '\n') return i;
    if (backslashEscapes && c === '\\') i++;
    else if (c === quote) {
      if (text[i + 1] !== quote) return i + 1;
      i++;
    }
  }
  return text.length;
}

/** The [start, end) of every key=value secret's value in `text`, in order, none inside another. */
function secretValues(text: string): [number, number][] {
  const spans: [number, number][] = [];
  for (const m of text.matchAll(SECRET_ASSIGNMENT)) {
    if (m.index < (spans.at(-1)?.[1] ?? 0)) continue;
    const start = m.index + m[0].length;
    spans.push([start, valueEnd(text, start)]);
  }
  return spans;
}

function redactUrlToken(token: string): string {
  const start = token.indexOf('//') + 2;
  let out = token;
  const at = token.lastIndexOf('@');
  if (at > start) {
    const userinfo = token.slice(start, at);
    const colon = userinfo.indexOf(':');
    if (colon !== -1) out = `${token.slice(0, start + colon + 1)}${MASK}${token.slice(at)}`;
  }
  // Query parameters: each `key=value` after `?` up to `&` or `#`.
  const q = out.indexOf('?', out.lastIndexOf('@') + 1);
  if (q === -1) return out;
  const [query, fragment] = splitOnce(out.slice(q + 1), '#');
  const params = query.split('&').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq === -1) return pair;
    const key = safeDecode(pair.slice(0, eq));
    return SECRET_KEY.test(key) ? `${pair.slice(0, eq)}=${MASK}` : pair;
  });
  return `${out.slice(0, q + 1)}${params.join('&')}${fragment === undefined ? '' : `#${fragment}`}`;
}

function splitOnce(text: string, separator: string): [string, string | undefined] {
  const i = text.indexOf(separator);
  return i === -1 ? [text, undefined] : [text.slice(0, i), text.slice(i + 1)];
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** `text` with every password it holds (in URLs, query parameters and key=value strings) replaced by `****`. */
export function redactText(text: string): string {
  // A key=value secret may itself look like a URL (`password=ab://cd`): a URL token that starts inside such a value
  // is part of the value, left to the key=value pass (read as a URL it has no userinfo, and would be kept whole).
  const values = secretValues(text);
  const inValue = (at: number) => values.some(([start, end]) => at >= start && at < end);
  // URLs first (their query may hold `password=`); then key=value pairs in what lies between them.
  let out = '';
  let last = 0;
  for (const match of text.matchAll(URL_TOKEN)) {
    if (inValue(match.index)) continue;
    out += redactConninfo(text.slice(last, match.index)) + redactUrlToken(match[0]);
    last = match.index + match[0].length;
  }
  return out + redactConninfo(text.slice(last));
}

function redactConninfo(text: string): string {
  let out = '';
  let last = 0;
  for (const [start, end] of secretValues(text)) {
    out += `${text.slice(last, start)}${MASK}`;
    last = end;
  }
  return out + text.slice(last);
}

/**
 * One server's URL as shardflake prints it: `postgres://user:****@host:port/db`, without query secrets. A URL that
 * does not parse is not echoed at all (it may be a password pasted in the wrong place): only its scheme is shown.
 */
export function describeServerUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1];
    return scheme ? `${scheme}://… (not shown: it does not parse)` : '(not shown: not a URL)';
  }
  return redactText(parsed.toString());
}

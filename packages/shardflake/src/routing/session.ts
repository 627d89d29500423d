import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import { shown } from '../errors/arguments.js';
import { driverDatabaseError, ShardflakeError } from '../errors/errors.js';
import type { ShardflakeId } from '../ids/id.js';
import { BatchFailure, type BatchStatement, queryBatch } from '../postgres/batch.js';
import { isConnectionLoss, wrapPgError } from '../postgres/connect.js';
import { traced } from '../telemetry/trace.js';
import type { NodeLease } from '../topology/nodes.js';
import type { RouterContext } from './context.js';
import { acquireOn, isConnectionLost } from './lease.js';
import { type MapState, shardOfIdIn } from './map.js';
import { ReadPositions } from './positions.js';
import { type AttemptInfo, routed } from './retry.js';
import { type ShardKey, shardForKey } from './shard-key.js';

/**
 * Shard sessions: application code running its own SQL in one logical shard, in one transaction on the shard's
 * current primary, with the shard's schema first on the search_path and the reference tables' schema after it
 * (see Statements.begin for why that is safe on pooled connections).
 *
 * fn may run more than once: when the shard turns out fenced or moved (or its primary failed over) before COMMIT,
 * the transaction is rolled back and fn runs again from the start on the shard's new home. Once COMMIT is sent
 * there is no retry: a connection lost during COMMIT is COMMIT_UNKNOWN.
 */
export type ShardTarget =
  | {
      /** A shard key (a user id, a string…): the session runs in the shard `router.shardFor(key)` names. */
      key: ShardKey;
    }
  | {
      /** An id of this cluster: the session runs in the shard its shard bits name. */
      id: ShardflakeId;
    }
  | {
      /** A logical shard number, 0 to logicalShards − 1. */
      shard: number;
    };

/** Options of `router.withShard`: a read-only session on a replica that has seen the writes it must see. */
export interface SessionOptions {
  /**
   * Run as `BEGIN READ ONLY` on a reader: a replica that has replayed this router's writes to the server (and the
   * token's, see `after`), else the primary.
   */
  readOnly?: boolean;
  /** A read token from `router.readToken()` (maybe of another process): the reader must have seen those writes. */
  after?: string;
}

/**
 * One transaction in one logical shard, as `router.withShard` hands it to its callback: your own SQL with the
 * shard's schema as search_path, and the connection for pg-based libraries.
 */
export interface ShardSession {
  /** The logical shard. */
  readonly shard: number;
  /** The shard's schema, first on the session's search_path (the reference tables' schema comes after it). */
  readonly schema: string;
  /** The configured server the shard lives on now. */
  readonly server: string;
  /**
   * The connection, for pg-based libraries (Drizzle; Kysely through `sessionPool(session)`). Valid only inside fn.
   * BEGIN, COMMIT and ROLLBACK sent through it become a savepoint, its release and a rollback to it, so a
   * library's own `transaction()` nests inside the session instead of ending it.
   */
  readonly client: pg.PoolClient;
  /**
   * Runs a statement in the session's transaction; int8 comes back as bigint. Errors are DATABASE_ERROR, or
   * SERVER_UNREACHABLE when the connection is lost.
   */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/** The shard a target names, under `map`; a target that is not `{ key }`, `{ id }` or `{ shard }` is refused. */
export function shardOfTarget(map: MapState, target: ShardTarget): number {
  const t = target as Partial<{ key: ShardKey; id: ShardflakeId; shard: number }> | null;
  const given = t && typeof t === 'object' ? ['key', 'id', 'shard'].filter((k) => k in t) : [];
  if (given.length !== 1)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      'a shard session needs exactly one of { key }, { id } or { shard } as its target',
    );
  if (given[0] === 'key') return shardForKey(t?.key as ShardKey, map.logicalShards);
  if (given[0] === 'id') return shardOfIdIn(map, t?.id as ShardflakeId);
  const shard = t?.shard;
  if (typeof shard !== 'number' || !Number.isInteger(shard))
    throw new ShardflakeError('UNKNOWN_SHARD', `shard ${shown(shard)} is not a shard number`);
  return shard;
}

/**
 * fn's error in the session's one shape: a client's database error becomes DATABASE_ERROR, a lost connection
 * SERVER_UNREACHABLE (wrapPgError, the one mapping); the application's own errors are kept.
 */
function asDatabaseError(error: unknown, node: string): unknown {
  if (error instanceof ShardflakeError) return error;
  if (isConnectionLoss(error)) return wrapPgError(error, node);
  const database = driverDatabaseError(error);
  if (!database) return error;
  const wrapped = wrapPgError(database, node);
  return new ShardflakeError(wrapped.code, wrapped.message, {
    sqlState: wrapped.sqlState,
    detail: wrapped.detail,
    cause: error,
  });
}

function sessionClosed(): ShardflakeError {
  return new ShardflakeError(
    'SESSION_CLOSED',
    'this shard session has ended (its callback returned); use it only inside the callback',
  );
}

/** One round trip of `statements`; a failure throws the failed statement's (mapped) error, as a query would. */
async function sendAll(client: pg.ClientBase, statements: BatchStatement[]): Promise<pg.QueryResult[]> {
  try {
    return await queryBatch(client, statements);
  } catch (failure) {
    if (!(failure instanceof BatchFailure)) throw failure;
    throw statements[failure.index]?.onError?.(failure.cause) ?? failure.cause;
  }
}

let savepointNumber = 0;
const TRANSACTION_CONTROL = /^\s*(begin|start\s+transaction|commit|end|rollback|abort)\b/i;

/**
 * A connection that several sessions share (shards of one server in a cross-shard transaction, see
 * transactions/cross.ts): their statements run one at a time in call order (`tail`), each after a switch of the
 * search_path to its own session's when the last statement was another's (`path`).
 */
export interface SharedConnection {
  tail: Promise<unknown>;
  path: string;
  /**
   * Statements not sent yet (the transaction's BEGIN, writes deferred to the commit): they go out in the same
   * round trip as the next statement (postgres/batch.ts), before it.
   */
  pending: BatchStatement[];
}

/**
 * Sends the connection's pending statements, then `statements`, in one round trip, and empties the pending list.
 * A failure throws what the failed statement's `onError` makes of it (or the driver's error), with `pending: true`
 * when a pending statement failed (`statements` did not run; an open transaction is left aborted).
 */
export async function sendWithPending(
  client: pg.ClientBase,
  shared: SharedConnection,
  statements: readonly BatchStatement[],
): Promise<pg.QueryResult[]> {
  const all = [...shared.pending.splice(0), ...statements];
  try {
    return (await queryBatch(client, all)).slice(all.length - statements.length);
  } catch (failure) {
    if (!(failure instanceof BatchFailure)) throw failure;
    const failed = all[failure.index];
    throw new PendingFailure(
      failure.index < all.length - statements.length,
      failed?.onError?.(failure.cause) ?? failure.cause,
    );
  }
}

/** A failed sendWithPending: `error` is the (mapped) error; `pending` whether a pending statement failed. */
export class PendingFailure extends Error {
  constructor(
    readonly pending: boolean,
    readonly error: unknown,
  ) {
    super((error as { message?: string } | undefined)?.message ?? String(error));
    this.name = 'PendingFailure';
  }
}

/**
 * What must go out before a session's next statement on a shared connection: the connection's pending statements
 * and a switch of the search_path to the session's; undefined when nothing must (the common case of a session's
 * second statement, which then allocates nothing).
 */
function before(shared: SharedConnection, ownPath: string): BatchStatement[] | undefined {
  const switching = shared.path !== ownPath;
  if (!switching && shared.pending.length === 0) return undefined;
  const statements = shared.pending.splice(0);
  if (switching) statements.push({ text: `SET LOCAL search_path TO ${ownPath}`, quiet: true });
  return statements;
}

/** Sends `before`'s statements on their own, for a statement that cannot ride with them. */
async function sendBefore(client: pg.ClientBase, shared: SharedConnection, ownPath: string): Promise<void> {
  const statements = before(shared, ownPath);
  if (statements === undefined) return;
  await sendAll(client, statements);
  shared.path = ownPath;
}

/**
 * The session's view of its leased connection: refuses use after fn returned and turns transaction control into
 * savepoints (a second BEGIN would only warn, and a COMMIT would end the session's transaction early — with it
 * the search_path and the guarantee that a retry re-runs everything). `shared` and `ownPath` are given for a
 * session on a shared connection (see SharedConnection).
 */
export function sessionClient(
  client: pg.PoolClient,
  isOpen: () => boolean,
  shared?: SharedConnection,
  ownPath?: string,
): { query: pg.PoolClient['query']; proxy: () => pg.PoolClient } {
  const savepoints: string[] = [];
  const control = (text: string): string | undefined => {
    const verb = TRANSACTION_CONTROL.exec(text)?.[1]?.toLowerCase().replace(/\s+/g, ' ');
    if (verb === undefined) return undefined;
    if (verb === 'begin' || verb === 'start transaction') {
      // Numbered across sessions: sessions sharing a connection must not release each other's savepoints.
      const name = `shardflake_nested_${++savepointNumber}`;
      savepoints.push(name);
      return `SAVEPOINT ${name}`;
    }
    const name = savepoints.pop();
    if (name === undefined)
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        'a shard session commits when its callback resolves and rolls back when it throws; COMMIT and ROLLBACK inside it are refused',
      );
    return verb === 'commit' || verb === 'end'
      ? `RELEASE SAVEPOINT ${name}`
      : `ROLLBACK TO SAVEPOINT ${name}; RELEASE SAVEPOINT ${name}`;
  };
  const query = (...args: unknown[]) => {
    if (!isOpen()) throw sessionClosed();
    if (!shared || ownPath === undefined) return send(args);
    const switchPath = () => sendBefore(client, shared, ownPath);
    const first = args[0] as { submit?: unknown } | undefined;
    const callback = args.find((a) => typeof a === 'function') as ((...r: unknown[]) => void) | undefined;
    if (typeof first?.submit === 'function') {
      // A submittable (a cursor, a stream) reports to its own listeners; it is sent in turn.
      shared.tail = shared.tail.then(switchPath).then(() => send(args));
      shared.tail.catch(() => {});
      return first;
    }
    const plain = args.filter((a) => typeof a !== 'function');
    const [text, values] = plain as [unknown, unknown];
    // A statement with parameters (never transaction control, never several statements) goes out in the same
    // round trip as what must precede it.
    const batched =
      typeof text === 'string' && Array.isArray(values) && values.length > 0 && plain.length === 2;
    const result = shared.tail.then(async () => {
      if (!batched) {
        await switchPath();
        return send(plain) as Promise<unknown>;
      }
      const statements = before(shared, ownPath);
      if (statements === undefined) return send(plain) as Promise<unknown>;
      statements.push({ text, values });
      const results = await sendAll(client, statements);
      shared.path = ownPath;
      return results[results.length - 1];
    });
    shared.tail = result.catch(() => {});
    if (!callback) return result;
    result.then(
      (r) => callback(null, r),
      (e: unknown) => callback(e),
    );
    return undefined;
  };
  const send = (args: unknown[]) => {
    const first = args[0] as string | { text?: string } | undefined;
    const text = typeof first === 'string' ? first : first?.text;
    const values = args[1];
    const noValues = values === undefined || (Array.isArray(values) && values.length === 0);
    const replaced = typeof text === 'string' && noValues ? control(text) : undefined;
    if (replaced !== undefined) {
      // Keep the shape the caller expects (a promise, or its callback).
      const callback = args.find((a) => typeof a === 'function') as ((...r: unknown[]) => void) | undefined;
      return callback ? client.query(replaced, callback) : client.query(replaced);
    }
    return (client.query as (...a: unknown[]) => unknown)(...args);
  };
  // Built on first use of `session.client`: most sessions only call `session.query`.
  let proxy: pg.PoolClient | undefined;
  const makeProxy = () =>
    new Proxy(client, {
      get(target, prop) {
        if (prop === 'query') return query;
        if (prop === 'release')
          return () => {
            throw new ShardflakeError(
              'INVALID_ARGUMENT',
              'session.client belongs to the session and is given back when the callback returns; do not release it',
            );
          };
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  return {
    query: query as pg.PoolClient['query'],
    proxy: () => {
      proxy ??= makeProxy();
      return proxy;
    },
  };
}

export async function withShard<T>(
  ctx: RouterContext,
  target: ShardTarget,
  fn: (session: ShardSession) => Promise<T> | T,
  options: SessionOptions = {},
): Promise<T> {
  if (typeof fn !== 'function')
    throw new ShardflakeError('INVALID_ARGUMENT', 'withShard needs a callback that receives the session');
  const readOnly = options.readOnly === true;
  const token = options.after === undefined ? undefined : ReadPositions.fromToken(options.after);
  return traced(ctx.onEvent, 'withShard', (trace) =>
    routed(
      ctx,
      'withShard',
      trace,
      (map) => shardOfTarget(map, target),
      !readOnly,
      async (placement: ShardPlacement, info: AttemptInfo) => {
        const lease = await acquireOn(
          ctx,
          placement.server,
          readOnly
            ? { intent: 'read', after: ctx.positions.after(placement.server, token), shard: placement.shard }
            : { intent: 'write', shard: placement.shard },
        );
        trace?.lease(placement.server, lease);
        return runSession(ctx, placement, lease, fn, readOnly, info);
      },
    ),
  );
}

async function runSession<T>(
  ctx: RouterContext,
  placement: ShardPlacement,
  lease: NodeLease,
  fn: (session: ShardSession) => Promise<T> | T,
  readOnly: boolean,
  info: AttemptInfo,
): Promise<T> {
  const { client } = lease;
  // A checked-out pg client with no 'error' listener crashes the process when its server goes away.
  let broken: unknown;
  const onError = (error: unknown) => {
    broken ??= error;
  };
  client.on('error', onError);
  // A lookup's capture trigger announces changes with a notice; they are applied before COMMIT (lookups/).
  const lookupChanges = readOnly ? undefined : ctx.sessionLookups.watch(client);
  let open = true;
  let phase: 'begin' | 'fn' | 'commit' = 'begin';
  const guarded = sessionClient(client, () => open);
  const session: ShardSession = {
    shard: placement.shard,
    schema: placement.schema,
    server: placement.server,
    get client() {
      return guarded.proxy();
    },
    async query(text, values) {
      if (!open) throw sessionClosed();
      try {
        return await guarded.query(text, values);
      } catch (error) {
        throw wrapPgError(error, lease.node);
      }
    },
  };
  try {
    await client.query(ctx.statements.begin(placement.schema, readOnly));
    phase = 'fn';
    const result = await fn(session);
    open = false;
    if (lookupChanges?.pending) await ctx.sessionLookups.beforeCommit(ctx, placement, client);
    lookupChanges?.stop();
    phase = 'commit';
    const done = await client.query('COMMIT');
    // COMMIT of a transaction in which a statement failed (fn caught the error) rolls back and says so.
    if (done.command === 'ROLLBACK')
      throw new ShardflakeError(
        'DATABASE_ERROR',
        `the session's transaction on shard ${placement.shard} was rolled back: a statement in it failed and the callback went on`,
        { sqlState: '25P02' },
      );
    client.removeListener('error', onError);
    if (!readOnly && ctx.nodes(placement.server).hasReplicas) {
      // The transaction has committed: a failure to read the position must not report it as failed.
      const position = await ctx
        .nodes(placement.server)
        .positionAfterWrite(lease)
        .catch(() => undefined);
      if (position !== undefined) ctx.positions.note(placement.server, position);
    }
    lease.release();
    return result;
  } catch (error) {
    open = false;
    lookupChanges?.stop();
    let lost = broken !== undefined || isConnectionLost(error, client);
    if (phase !== 'commit' && !lost) {
      // A connection that cannot even roll back must not go back to the pool.
      lost = await client.query('ROLLBACK').then(
        () => false,
        () => true,
      );
    }
    const gone = ctx.nodes(placement.server).noteError(lease.node, broken ?? error);
    client.removeListener('error', onError);
    lease.release(lost ? (broken ?? error) : undefined);
    if (phase === 'commit' && lost)
      throw new ShardflakeError(
        'COMMIT_UNKNOWN',
        `the connection to shard ${placement.shard}'s server was lost during COMMIT: the transaction may or may not have committed, and was not re-run`,
        { sqlState: (error as { code?: string }).code, cause: error },
      );
    if (gone && phase !== 'commit') info.nodeGone = true;
    // One error story (docs/typed-api.md): a database error raised in fn by any client — session.query, pg through
    // session.client, Kysely, Drizzle — reaches the caller as DATABASE_ERROR with its SQLSTATE in `sqlState` and
    // what the client threw as `cause`; any other error of fn goes back as it is. The router's own (BEGIN,
    // COMMIT) are typed too.
    if (phase !== 'fn') throw wrapPgError(error, lease.node);
    throw asDatabaseError(error, lease.node);
  }
}

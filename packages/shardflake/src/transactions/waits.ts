import type pg from 'pg';
import { isShardflakeError, ShardflakeError, sqlStateOf } from '../errors/errors.js';

/**
 * A participant's connection as its sessions see it (cross.ts): every statement the callback sends is registered
 * with the deadlock detector while it is in flight (deadlocks/detector.ts), and none is sent once the transaction
 * is a deadlock's victim — the detector's cancel then reaches the backend either in the statement it meant or
 * idle, never in a later one. Every way pg takes a statement goes through `query`: a promise, a callback, or a
 * submittable (a Query, a cursor, postgres/batch.ts's batch), whose end is its ReadyForQuery or its error.
 *
 * `watch` registers one statement and returns what unregisters it; `refusal` is the error every statement gets
 * from now on, or undefined while the transaction may go on. A statement that fails after the transaction became
 * the victim fails with that error (the cancel's 57014 is the deadlock, not a cancel).
 */
export function watchedClient(
  client: pg.PoolClient,
  watch: () => () => void,
  refusal: () => Error | undefined,
): pg.PoolClient {
  const query = (...args: unknown[]): unknown => {
    const refused = refusal();
    const first = args[0] as
      | {
          submit?: unknown;
          handleError?: (...a: unknown[]) => void;
          handleReadyForQuery?: (...a: unknown[]) => void;
        }
      | undefined;
    const callbackAt = args.findIndex((a) => typeof a === 'function');
    const callback = args[callbackAt] as ((error: unknown, result?: unknown) => void) | undefined;
    if (refused) {
      if (typeof first?.submit === 'function') {
        queueMicrotask(() => first.handleError?.(refused));
        return first;
      }
      if (callback) {
        queueMicrotask(() => callback(refused));
        return undefined;
      }
      return Promise.reject(refused);
    }
    let done: (() => void) | undefined = watch();
    const end = () => {
      done?.();
      done = undefined;
    };
    const send = client.query as (...a: unknown[]) => unknown;
    if (typeof first?.submit === 'function') {
      const ready = first.handleReadyForQuery;
      const error = first.handleError;
      first.handleReadyForQuery = function (this: unknown, ...a: unknown[]) {
        end();
        return ready?.apply(this, a);
      };
      first.handleError = function (this: unknown, ...a: unknown[]) {
        end();
        return error?.apply(this, [refusal() ?? a[0], ...a.slice(1)]);
      };
      return send.apply(client, args);
    }
    if (callback) {
      const wrapped = [...args];
      wrapped[callbackAt] = (e: unknown, result?: unknown) => {
        end();
        callback(e ? (refusal() ?? e) : e, result);
      };
      return send.apply(client, wrapped);
    }
    return (send.apply(client, args) as Promise<unknown>).then(
      (result) => {
        end();
        return result;
      },
      (e: unknown) => {
        end();
        throw refusal() ?? e;
      },
    );
  };
  return new Proxy(client, {
    get(target, prop) {
      if (prop === 'query') return query;
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * The typed error of a wait that a transaction's bounds ended (deadlocks/detector.ts): a lock wait past
 * lock_timeout (55P03) is LOCK_TIMEOUT; a session its server ended for idling in the transaction (25P03) is
 * IDLE_TIMEOUT. Undefined for any other error. `settings` names the bounds in force, for the message.
 */
export function waitBoundError(
  error: unknown,
  server: string,
  settings: { lockTimeoutMs: number; idleTimeoutMs: number },
): ShardflakeError | undefined {
  if (isShardflakeError(error, 'LOCK_TIMEOUT') || isShardflakeError(error, 'IDLE_TIMEOUT')) return error;
  const state = sqlStateOf(error);
  if (state === '55P03')
    return new ShardflakeError(
      'LOCK_TIMEOUT',
      `a statement on server ${server} could not take a lock in time (${settings.lockTimeoutMs > 0 ? `lock_timeout ${settings.lockTimeoutMs} ms for transactions across shards` : "the server's lock_timeout"}, or NOWAIT): another transaction held it; the transaction was rolled back on every server`,
      { sqlState: state, cause: error },
    );
  if (state === '25P03')
    return new ShardflakeError(
      'IDLE_TIMEOUT',
      `server ${server} ended this transaction's session: it sat idle in the transaction longer than ${settings.idleTimeoutMs > 0 ? `${settings.idleTimeoutMs} ms (idleTimeoutMs)` : "the server's idle_in_transaction_session_timeout"}; nothing of the transaction committed`,
      { sqlState: state, cause: error },
    );
  return undefined;
}

import { AuthFailedError } from '../errors/errors.js';
import { describeUrl, loginRefusal, roleOf } from '../postgres/connect.js';
import type { ServerNodes } from './nodes.js';

/**
 * A server that refused a router's login is remembered, so a router without the right password does not dial it
 * on every operation (issue 32: one stale application instance, dialling per operation, filled a new server's
 * max_connections and shut everyone out of it).
 *
 * The rule: after a refused login, every acquire fails at once with the same AUTH_FAILED until the wait is over;
 * then exactly one acquire tries again (the others wait for what it finds). Each further refusal doubles the wait
 * (1 s, 2 s, 4 s … 30 s); a login that succeeds forgets it all. Before the first refusal is known, the pool dials
 * at most its size at once, which is the bound on connections the router ever holds on a server.
 *
 * One memory per server, shared by every pool of that server (the router's data pools and its commit pools).
 */
export interface LoginMemory {
  /** The server's name, for messages. */
  readonly server: string;
  /** Acquires `fn` under the rule above: `fn` is not called while the server's refusal is remembered. */
  guard<T>(fn: () => Promise<T>): Promise<T>;
}

export interface LoginMemoryOptions {
  /** Node URLs of the server (the first one is named in messages). */
  urls: readonly string[];
  /** Where the password belongs, said after the reason. */
  hint: string;
  /** First wait after a refusal (default 1000 ms); it doubles up to `maxWaitMs`. */
  firstWaitMs?: number;
  /** Longest wait (default 30 000 ms). */
  maxWaitMs?: number;
  /** Milliseconds, monotonic; injectable for tests. */
  clock?: () => number;
}

export function loginMemory(server: string, options: LoginMemoryOptions): LoginMemory {
  const clock = options.clock ?? (() => performance.now());
  const firstWaitMs = options.firstWaitMs ?? 1000;
  const maxWaitMs = options.maxWaitMs ?? 30_000;
  const url = options.urls[0];
  let refused: { error: AuthFailedError; at: number; retryAt: number; waitMs: number } | undefined;
  let probe: Promise<unknown> | undefined;

  const fail = (error: unknown, reason: string, startedAt: number): AuthFailedError => {
    // Refusals of attempts that started before the last one was known are that same refusal, not a further one.
    if (refused && startedAt <= refused.at) return copyOf(refused.error);
    const waitMs = refused ? Math.min(refused.waitMs * 2, maxWaitMs) : firstWaitMs;
    const role = roleOf(url);
    const authError = new AuthFailedError(
      `server ${server} (${url ? describeUrl(url) : 'no URL'}) refused the login of role ${role} (${reason}); ${options.hint}`,
      {
        server,
        role,
        reason,
        hint: options.hint,
        sqlState: (error as { sqlState?: string; code?: string }).sqlState ?? loginState(error),
        cause: error,
      },
    );
    const at = clock();
    refused = { error: authError, at, retryAt: at + waitMs, waitMs };
    return authError;
  };

  async function attempt<T>(fn: () => Promise<T>): Promise<T> {
    const startedAt = clock();
    try {
      const result = await fn();
      refused = undefined;
      return result;
    } catch (error) {
      const reason = loginRefusal(error);
      throw reason === undefined ? error : fail(error, reason, startedAt);
    }
  }

  return {
    server,
    async guard(fn) {
      for (;;) {
        if (!refused) return attempt(fn);
        if (probe) {
          await probe;
          continue;
        }
        if (clock() < refused.retryAt) throw again(refused, clock());
        // The wait is over: this acquire is the one attempt; the others wait for it.
        const trying = attempt(fn);
        // Waiters resume once `probe` is cleared, so they see what the attempt found.
        probe = trying.then(settled, settled).then(() => {
          probe = undefined;
        });
        return trying;
      }
    },
  };
}

const settled = () => {};

/** The remembered refusal, thrown again without dialling; its `detail` says so. */
function again(
  { error, retryAt }: { error: AuthFailedError; retryAt: number },
  now: number,
): AuthFailedError {
  return copyOf(
    error,
    `not tried: a login was refused moments ago; the next attempt is in ${Math.max(0, Math.ceil(retryAt - now))} ms`,
  );
}

/** An AUTH_FAILED like `error`, with a stack of its own. */
function copyOf(error: AuthFailedError, detail?: string): AuthFailedError {
  return new AuthFailedError(error.message, {
    server: error.server,
    role: error.role,
    reason: error.reason,
    hint: error.hint,
    sqlState: error.sqlState,
    detail,
    cause: error.cause,
  });
}

function loginState(error: unknown): string | undefined {
  const code = (error as { code?: unknown }).code;
  return code === '28P01' || code === '28000' ? code : undefined;
}

/** `nodes` whose acquires go through the server's login memory. */
export function withLoginMemory(nodes: ServerNodes, memory: LoginMemory): ServerNodes {
  return {
    name: nodes.name,
    hasReplicas: nodes.hasReplicas,
    acquire: (options) => memory.guard(() => nodes.acquire(options)),
    positionAfterWrite: (lease) => nodes.positionAfterWrite(lease),
    noteError: (node, error) => nodes.noteError(node, error),
    end: () => nodes.end(),
  };
}

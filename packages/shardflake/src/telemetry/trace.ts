import { redactSecrets, ShardflakeError } from '../errors/errors.js';
import { isConnectionLoss, wrapPgError } from '../postgres/connect.js';
import type { NodeLease } from '../topology/nodes.js';
import type { Operation, RetryReason, RouterEvent, RouterEventHook } from './events.js';

/**
 * What one routed operation did, collected while it runs and reported as one OperationEvent when it ends. A trace
 * exists only when the application set `onEvent`: without a hook the router builds no event objects at all.
 */
export class OperationTrace {
  readonly #started = performance.now();
  readonly #shards = new Set<number>();
  readonly #servers = new Set<string>();
  readonly #nodes: { node: string; role: NodeLease['role'] }[] = [];
  #waitMs = 0;
  readonly retryReasons: RetryReason[] = [];

  constructor(
    readonly operation: Operation,
    readonly hook: RouterEventHook,
  ) {}

  shard(shard: number): void {
    this.#shards.add(shard);
  }

  lease(server: string, lease: NodeLease): void {
    this.#servers.add(server);
    this.#waitMs += lease.waitMs;
    if (!this.#nodes.some((n) => n.node === lease.node && n.role === lease.role))
      this.#nodes.push({ node: lease.node, role: lease.role });
  }

  end(error?: unknown): void {
    emitSafely(this.hook, {
      type: 'operation',
      operation: this.operation,
      shards: [...this.#shards],
      servers: [...this.#servers],
      nodes: this.#nodes,
      waitMs: this.#waitMs,
      totalMs: performance.now() - this.#started,
      retries: this.retryReasons.length,
      retryReasons: this.retryReasons,
      ...(error === undefined ? {} : { error: asShardflakeError(error) }),
    });
  }
}

/** The event's error: shardflake's own as is, a PostgreSQL error wrapped, anything else (an error of fn) named. */
function asShardflakeError(error: unknown): ShardflakeError {
  if (
    error instanceof ShardflakeError ||
    (error as { code?: unknown } | null)?.code !== undefined ||
    isConnectionLoss(error)
  )
    return wrapPgError(error);
  return new ShardflakeError('INVALID_ARGUMENT', `the callback failed: ${redactSecrets(String(error))}`, {
    cause: error,
  });
}

/** Calls the hook; an observer that throws is ignored, the router's work never depends on it. */
export function emitSafely(hook: RouterEventHook, event: RouterEvent): void {
  try {
    hook(event);
  } catch {
    // ignored on purpose (see above)
  }
}

/** Runs `work` inside a trace when a hook is set, reporting its end (or its error) once. */
export async function traced<T>(
  hook: RouterEventHook | undefined,
  operation: Operation,
  work: (trace: OperationTrace | undefined) => Promise<T>,
): Promise<T> {
  if (!hook) return work(undefined);
  const trace = new OperationTrace(operation, hook);
  try {
    const result = await work(trace);
    trace.end();
    return result;
  } catch (error) {
    trace.end(error);
    throw error;
  }
}

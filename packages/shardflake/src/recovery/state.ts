import type pg from 'pg';
import { CAPABILITY_SQL, installTransactionLog, readClusterId } from '../catalog/transactions.js';
import { ShardflakeError } from '../errors/errors.js';
import { type Queryable, type ServerAccess, wrapPgError } from '../postgres/connect.js';
import type { RouterEvent, RouterEventHook } from '../telemetry/events.js';
import { emitSafely } from '../telemetry/trace.js';
import type { ServerNodes } from '../topology/nodes.js';
import { type RecoveryReport, recoverTransactions } from './recovery.js';

/**
 * What a router keeps for cross-server transactions: the cluster's identity (read once from the catalog), which
 * servers are ready to take part (max_prepared_transactions > 0 and a current decision log), and the recovery
 * that runs in the background.
 *
 * How soon after a crash: the first pass runs `recoveryDelayMs` after the router starts (so a restarted router
 * settles what its predecessor left), then every `recoveryIntervalMs`. A prepared transaction with a decision is
 * settled by the next pass; one without is rolled back by the first pass after it is `inDoubtAfterMs` old. With
 * the defaults (10 s, 5 s), any router of the cluster resolves a crashed coordinator's transaction within about
 * 15 s. The timer is unref'd: it never keeps a process alive.
 */
export interface TransactionOptions {
  /** Resolve in-doubt transactions in the background (default true). */
  recovery?: boolean;
  /** Time between background recovery passes (default 10 000 ms). */
  recoveryIntervalMs?: number;
  /** The first pass, after the router starts (default 1 000 ms). */
  recoveryDelayMs?: number;
  /** A prepared transaction without a decision is taken for abandoned after this long (default 5 000 ms). */
  inDoubtAfterMs?: number;
}

export const TRANSACTION_DEFAULTS = {
  recovery: true,
  recoveryIntervalMs: 10_000,
  recoveryDelayMs: 1_000,
  inDoubtAfterMs: 5_000,
};

export interface TransactionStateDeps {
  /**
   * The servers recovery looks at: the config's, and the ones the router learned from the catalog and used since
   * (a server added for a move, where a transaction of this router may have prepared).
   */
  servers(): readonly string[];
  catalog: string;
  nodes(server: string): ServerNodes;
  /**
   * A connection of its own to a server's primary, outside the pools: what a transaction needs while it holds
   * pooled connections (a pool whose every connection waits for one more would wait for ever).
   */
  connect(server: string): Promise<pg.Client>;
  hook(): RouterEventHook | undefined;
}

export class TransactionState {
  readonly options: typeof TRANSACTION_DEFAULTS;
  readonly #deps: TransactionStateDeps;
  #clusterId: Promise<string> | undefined;
  readonly #ready = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #pass: Promise<RecoveryReport | undefined> | undefined;
  #closed = false;
  /** The last background pass's report (for tests and status). */
  lastRecovery: RecoveryReport | undefined;

  constructor(deps: TransactionStateDeps, options: TransactionOptions = {}) {
    this.#deps = deps;
    const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
    this.options = { ...TRANSACTION_DEFAULTS, ...given };
  }

  emit(event: RouterEvent): void {
    const hook = this.#deps.hook();
    if (hook) emitSafely(hook, event);
  }

  /** The cluster's identity from the catalog, read once (a failed read is tried again next time). */
  clusterId(): Promise<string> {
    this.#clusterId ??= this.#alone(this.#deps.catalog, async (client) => {
      const id = await readClusterId(client);
      if (id === null)
        throw new ShardflakeError(
          'INVALID_CONFIG',
          `the catalog on server ${this.#deps.catalog} holds no cluster; run cluster init first`,
        );
      return id;
    }).catch((error: unknown) => {
      this.#clusterId = undefined;
      throw wrapPgError(error);
    });
    return this.#clusterId;
  }

  async #alone<T>(server: string, fn: (client: Queryable) => Promise<T>): Promise<T> {
    const client = await this.#deps.connect(server);
    try {
      return await fn(client);
    } finally {
      await client.end().catch(() => {});
    }
  }

  /**
   * Refuses a server that cannot prepare transactions (before the transaction writes anything there), and
   * installs the decision log on one that lacks it. Asked once per server per router; `client` is the
   * participant's connection, inside its transaction.
   */
  async ensureReady(server: string, client: Queryable): Promise<void> {
    if (this.#ready.has(server)) return;
    const { rows } = await client.query(CAPABILITY_SQL);
    const row = rows[0] as { max_prepared: number; log_ready: boolean };
    if (row.max_prepared <= 0)
      throw new ShardflakeError(
        'PREPARED_TRANSACTIONS_DISABLED',
        `server ${server} has max_prepared_transactions = 0, so it cannot take part in a transaction across servers; set max_prepared_transactions (e.g. to max_connections) and restart it`,
      );
    if (!row.log_ready) await this.#alone(server, (c) => installTransactionLog(c));
    this.#ready.add(server);
  }

  /** Connections for recovery: the router's own pools. */
  access(): ServerAccess {
    return {
      servers: this.#deps.servers(),
      use: async (server, fn) => {
        const lease = await this.#deps.nodes(server).acquire({ intent: 'write' });
        let failure: unknown;
        try {
          return await fn(lease.client);
        } catch (error) {
          failure = error;
          throw error;
        } finally {
          lease.release(failure);
        }
      },
    };
  }

  /** One recovery pass now (waits for a pass already running, then runs its own). */
  async recover(): Promise<RecoveryReport> {
    while (this.#pass) await this.#pass.catch(() => {});
    const pass = (async () => {
      const report = await recoverTransactions(this.access(), await this.clusterId(), {
        inDoubtAfterMs: this.options.inDoubtAfterMs,
        emit: (event) => this.emit(event),
      });
      this.lastRecovery = report;
      return report;
    })();
    this.#pass = pass;
    try {
      return await pass;
    } finally {
      if (this.#pass === pass) this.#pass = undefined;
    }
  }

  /** Starts the background passes. */
  start(): void {
    // The identity is read now, while the catalog answers, so commits need nothing from it later.
    this.clusterId().catch(() => {});
    if (!this.options.recovery || this.#closed) return;
    this.#schedule(this.options.recoveryDelayMs);
  }

  /** Asks for a pass soon (after a commit left prepared transactions behind). */
  soon(): void {
    if (!this.options.recovery || this.#closed) return;
    clearTimeout(this.#timer);
    this.#schedule(this.options.inDoubtAfterMs);
  }

  #schedule(ms: number): void {
    this.#timer = setTimeout(() => {
      // A failed pass (the catalog or a server down) is tried again at the next tick.
      this.recover()
        .catch(() => {})
        .finally(() => {
          if (!this.#closed) this.#schedule(this.options.recoveryIntervalMs);
        });
    }, ms);
    this.#timer.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#pass?.catch(() => {});
  }
}

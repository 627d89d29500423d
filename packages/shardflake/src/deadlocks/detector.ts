/*
 * deadlocks/: Deadlocks across servers, and the bounds on every wait of a transaction across shards: the tag each
 * of its sessions carries (tag.ts), the wait-for graph joined from every server's lock waits (graph.ts), the
 * deadlocks in it and their victims (cycles.ts), and the detector a router runs while one of its transactions
 * waits (this file).
 *
 * May import: errors, postgres, catalog, telemetry.
 */
import type pg from 'pg';
import { recordDeadlock } from '../catalog/deadlocks.js';
import type { RouterEvent } from '../telemetry/events.js';
import { type Deadlock, findDeadlocks } from './cycles.js';
import {
  buildGraph,
  CANCEL_TAGGED_SQL,
  intersect,
  readWaits,
  type WaitGraph,
  type WaitRow,
} from './graph.js';
import { formatTag, type TransactionTag } from './tag.js';

export type { Deadlock } from './cycles.js';
export type { TransactionTag } from './tag.js';

/**
 * Why a transaction across shards never waits for ever.
 *
 * A transfer a→b locks its row on a and waits on b; a transfer b→a holds that row on b and waits on a. Each
 * server sees one session waiting for another that is idle in its transaction, which is no deadlock to it: its
 * own detector never fires. The cycle exists only in the union of the servers' waits, so shardflake joins them.
 *
 * Who looks, and when. Not a process of its own: each router watches its own transactions. Every statement a
 * transaction across shards sends while its callback runs (or a beforeCommit hook) is registered here while it is
 * in flight (transactions/waits.ts). When one has been in flight for `deadlockCheckMs` (1000 ms, PostgreSQL's
 * default deadlock_timeout), the router reads every server's waits (graph.ts) — one statement per server, on a
 * connection of its own, outside the pools its waiting transactions may have exhausted — and again every half of
 * that while any of its statements still waits. A router with nothing waiting reads nothing: the detector costs
 * a timestamp per statement when no wait is long.
 *
 * What it breaks, and who breaks it. The graph's strongly connected components of more than one node whose waits
 * lie on two servers or more (cycles.ts); each one's victim is its youngest transaction across shards. A router
 * cancels only its own transactions: when it finds that the victim of a deadlock is one of its transactions with
 * a statement still in flight, it cancels that statement; when the victim is another router's, it does nothing
 * and that router does the same reasoning on its own.
 *
 * Why every deadlock across servers is found and broken, within about 1.5 × deadlockCheckMs of forming:
 * - every member of a deadlock waits in a statement that returns only once a member is cancelled or times out
 *   (lock_timeout, below), so the waits are there to be read for as long as the deadlock lasts;
 * - its victim is a transaction across shards (a component spanning servers has one, cycles.ts), and a member, so
 *   it is waiting in a statement its router registered; that router reads the graph when the statement has waited
 *   deadlockCheckMs, or within half of it when it waited that long already before the cycle closed;
 * - every router computes the same victim from the same tags. A reading of the servers is not one instant, so a
 *   router acts only on a deadlock it finds in two readings one after the other (graph.ts `intersect`).
 * The victim's router may be gone (killed while its session waits) or its statement may be one this file does
 * not watch (a cursor's later reads): then lock_timeout ends the wait instead, with LOCK_TIMEOUT.
 *
 * Why one victim per cycle: the victim is a function of the deadlock's members, the same for every router, and
 * only the victim's router acts. Overlapping cycles are one component; its youngest is cancelled, and only a cycle
 * that this leaves standing causes another victim, its own youngest, in the same reading (cycles.ts
 * `findDeadlocks`). (A deadlock on one server is left to PostgreSQL, cycles.ts.)
 *
 * Why a prepared transaction is never a victim: it has no session, so it waits for nothing and lies on no cycle
 * (its locks show a blocker pid 0, graph.ts); and a router chooses its own transaction only while its callback's
 * statements run, before its commit sends any PREPARE (transactions/cross.ts): a transaction that has begun to
 * commit is never cancelled.
 *
 * Why the cancel never hits an innocent statement. pg_cancel_backend signals a pid, and a pooled connection's pid
 * runs one transaction after another. So: (1) the cancel names the transaction's tag in the same statement
 * (`WHERE application_name = tag`), and the tag reverts when the transaction ends, so only a backend still in the
 * victim's transaction is signalled; (2) before that statement is sent, the transaction is marked as the victim:
 * its callback's statements are refused from then on, and its ROLLBACK on that connection waits for the cancel's
 * answer — so the signal reaches the backend inside the victim's transaction (a statement of it fails, as wanted)
 * or idle, where PostgreSQL drops a cancel (postgres.c: a cancel that arrives while it reads a command is
 * ignored), never in the ROLLBACK or in a statement of a later transaction; (3) a cancel whose answer does not
 * come back leaves the signal's fate unknown, and the connection is then closed rather than given back to the
 * pool.
 *
 * The waits that are not cycles (a router that stopped reading while holding row locks, a callback that awaits
 * something else while its transaction is open) are bounded per transaction, in the same round trip as its
 * BEGIN: `lock_timeout` (10 s: far beyond the detector's 1–2 s, so a wait that long is behind a stuck holder, not
 * a cycle) ends a wait with LOCK_TIMEOUT, and `idle_in_transaction_session_timeout` (60 s) makes the server end
 * a session its router has left idle in its transaction, releasing its locks (IDLE_TIMEOUT for its caller).
 */
export interface DeadlockOptions {
  /**
   * How long a statement of a transaction across shards waits before the router looks for a deadlock across
   * servers (default 1000 ms, PostgreSQL's deadlock_timeout); then every half of it while the wait lasts. 0 turns
   * the detector off, and the sessions' tag with it.
   */
  deadlockCheckMs?: number;
  /**
   * `lock_timeout` of every statement of a transaction across shards (default 10 000 ms): a wait for a lock longer
   * than this fails with LOCK_TIMEOUT. 0 leaves the server's own setting.
   */
  lockTimeoutMs?: number;
  /**
   * `idle_in_transaction_session_timeout` of a transaction across shards (default 60 000 ms): a session left idle
   * in the transaction longer than this is ended by its server, which releases its locks, and the transaction
   * fails with IDLE_TIMEOUT. 0 leaves the server's own setting.
   */
  idleTimeoutMs?: number;
}

export const DEADLOCK_DEFAULTS = { deadlockCheckMs: 1000, lockTimeoutMs: 10_000, idleTimeoutMs: 60_000 };

/** How long one reading of a server (or a cancel) may take before it counts as not answered. */
const READ_TIMEOUT_MS = 3000;
/**
 * How long a server that did not answer is left out of the readings, so that one server down does not hold every
 * check for READ_TIMEOUT_MS (a deadlock through it cannot be seen anyway; lock_timeout ends it).
 */
const DOWN_MS = 10_000;

/** A statement of a transaction across shards in flight on one server, as transactions/waits.ts registers it. */
export interface Waiter {
  readonly tag: TransactionTag;
  /** The configured server the statement runs on. */
  readonly server: string;
  /** performance.now() when it was sent. */
  readonly since: number;
  /**
   * The router chose this transaction as `deadlock`'s victim. Returns false when it is too late (the statement
   * has returned, or the commit has begun); otherwise the transaction is the victim from now on, sends nothing more
   * on this server's connection until `cancelled` settles, and closes that connection instead of rolling it back
   * when `cancelled` is false (the cancel's fate is unknown).
   */
  choose(deadlock: Deadlock, cancelled: Promise<boolean>): boolean;
}

export interface DeadlockDetectorDeps {
  /** The servers whose waits make the graph: the config's and the map's. */
  servers(): readonly string[];
  /** The catalog server, where deadlocks broken are recorded for `cluster status`. */
  readonly catalog: string;
  /** A connection of the detector's own to a server's primary (never from the pools). */
  connect(server: string): Promise<pg.Client>;
  emit(event: RouterEvent): void;
}

export class DeadlockDetector {
  readonly options: typeof DEADLOCK_DEFAULTS;
  readonly #deps: DeadlockDetectorDeps;
  readonly #waiters = new Set<Waiter>();
  readonly #clients = new Map<string, Promise<pg.Client>>();
  /** performance.now() until which a server that did not answer is left out of the readings. */
  readonly #down = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Number.POSITIVE_INFINITY;
  #checking = false;
  #closed = false;

  constructor(deps: DeadlockDetectorDeps, options: DeadlockOptions = {}) {
    this.#deps = deps;
    const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
    this.options = { ...DEADLOCK_DEFAULTS, ...given };
  }

  /** Whether transactions carry the tag and register their statements (false when the detector is off). */
  get watching(): boolean {
    return this.options.deadlockCheckMs > 0 && !this.#closed;
  }

  /**
   * The settings of a transaction's sessions, as [parameter, value] for `set_config(…, true)` with its BEGIN: its
   * tag (while the detector is on) and its bounds (those not 0).
   */
  settings(tag: TransactionTag): [string, string][] {
    const { deadlockCheckMs, lockTimeoutMs, idleTimeoutMs } = this.options;
    const out: [string, string][] = [];
    if (deadlockCheckMs > 0) out.push(['application_name', formatTag(tag)]);
    if (lockTimeoutMs > 0) out.push(['lock_timeout', `${lockTimeoutMs}ms`]);
    if (idleTimeoutMs > 0) out.push(['idle_in_transaction_session_timeout', `${idleTimeoutMs}ms`]);
    return out;
  }

  /** Registers a statement in flight; call the returned function when it has returned. */
  wait(waiter: Waiter): () => void {
    if (!this.watching) return () => {};
    this.#waiters.add(waiter);
    this.#schedule(waiter.since + this.options.deadlockCheckMs);
    return () => {
      this.#waiters.delete(waiter);
    };
  }

  #schedule(at: number): void {
    if (this.#closed || this.#checking || at >= this.#timerAt) return;
    clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => this.#tick(), Math.max(0, at - performance.now()));
    this.#timer.unref();
  }

  async #tick(): Promise<void> {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    if (this.#closed || this.#waiters.size === 0) return;
    const { deadlockCheckMs } = this.options;
    const now = performance.now();
    const oldest = Math.min(...[...this.#waiters].map((w) => w.since));
    if (now - oldest < deadlockCheckMs) {
      this.#schedule(oldest + deadlockCheckMs);
      return;
    }
    this.#checking = true;
    try {
      await this.check();
    } catch {
      // A reading that failed (a server down) is tried again at the next tick; lock_timeout bounds the wait.
    } finally {
      this.#checking = false;
    }
    if (this.#waiters.size > 0) {
      const next = Math.min(...[...this.#waiters].map((w) => w.since)) + deadlockCheckMs;
      this.#schedule(Math.max(next, performance.now() + deadlockCheckMs / 2));
    }
  }

  /**
   * One look: the deadlocks whose victim is one of this router's waiting transactions, found in two readings, and
   * each of those victims cancelled. Returns the deadlocks it broke.
   */
  async check(): Promise<Deadlock[]> {
    const ours = (d: Deadlock) => [...this.#waiters].some((w) => w.tag.txid === d.victim.txid);
    const first = await this.#read();
    if (!findDeadlocks(first).some(ours)) return [];
    const second = await this.#read();
    const broken: Deadlock[] = [];
    for (const deadlock of findDeadlocks(intersect(first, second)).filter(ours))
      if (await this.#break(deadlock)) broken.push(deadlock);
    return broken;
  }

  /** Every server's waits as one graph; a server that does not answer adds nothing (and is read again later). */
  async #read(): Promise<WaitGraph> {
    const now = performance.now();
    const servers = this.#deps.servers().filter((s) => (this.#down.get(s) ?? 0) <= now);
    const rows = await Promise.all(
      servers.map(async (server) => [server, (await this.#use(server, readWaits))?.value ?? []] as const),
    );
    return buildGraph(new Map<string, readonly WaitRow[]>(rows));
  }

  /**
   * Cancels the victim's statements that are still in flight (transactions/waits.ts decides, in `choose`), then
   * reports the deadlock. See the top of this file for why the cancel cannot hit another transaction.
   */
  async #break(deadlock: Deadlock): Promise<boolean> {
    const victims = [...this.#waiters].filter((w) => w.tag.txid === deadlock.victim.txid);
    const cancels = new Map<string, { done: Promise<boolean>; settle: (ok: boolean) => void }>();
    let waitedMs = 0;
    for (const w of victims) {
      let cancel = cancels.get(w.server);
      if (!cancel) {
        let settle: (ok: boolean) => void = () => {};
        const done = new Promise<boolean>((resolve) => {
          settle = resolve;
        });
        cancel = { done, settle };
      }
      if (!w.choose(deadlock, cancel.done)) continue;
      cancels.set(w.server, cancel);
      waitedMs = Math.max(waitedMs, performance.now() - w.since);
    }
    if (cancels.size === 0) return false;
    const tag = formatTag(deadlock.victim);
    await Promise.all(
      [...cancels].map(async ([server, cancel]) => {
        const answered = await this.#use(server, (client) => client.query(CANCEL_TAGGED_SQL, [tag]));
        cancel.settle(answered !== undefined);
      }),
    );
    const record = {
      victim: deadlock.victim.txid,
      transactions: deadlock.transactions.map((t) => t.txid),
      sessions: deadlock.members.length,
      servers: [...deadlock.servers],
      waitedMs: Math.round(waitedMs),
    };
    this.#deps.emit({ type: 'deadlock', ...record });
    // For cluster status; best effort, and nobody waits for it.
    void this.#use(this.#deps.catalog, (client) => recordDeadlock(client, record));
    return true;
  }

  /**
   * Runs `fn` on the detector's connection to `server`, bounded by READ_TIMEOUT_MS: `{ value }`, or undefined when
   * the server did not answer in time or failed (the connection is then closed, and made again next time).
   */
  async #use<T>(server: string, fn: (client: pg.Client) => Promise<T>): Promise<{ value: T } | undefined> {
    // A check still running when the router closes opens nothing new.
    if (this.#closed) return undefined;
    let entry = this.#clients.get(server);
    if (!entry) {
      entry = this.#deps.connect(server);
      this.#clients.set(server, entry);
    }
    const client = entry;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), READ_TIMEOUT_MS);
    });
    const work = (async () => ({ value: await fn(await client) }))();
    try {
      const result = await Promise.race([work, late]);
      if (result === undefined) throw new Error(`server ${server} did not answer`);
      return result;
    } catch {
      this.#down.set(server, performance.now() + DOWN_MS);
      if (this.#clients.get(server) === client) this.#clients.delete(server);
      client.then((c) => c.end()).catch(() => {});
      work.catch(() => {});
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    const clients = [...this.#clients.values()];
    this.#clients.clear();
    await Promise.all(clients.map((c) => c.then((x) => x.end()).catch(() => {})));
  }
}

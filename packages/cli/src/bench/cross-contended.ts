import { createRouter, type RouterOptions } from 'shardflake/internal/router/router.js';
import { percentile } from './stats.js';
import { balances, runTransfers, startTransferCluster } from './transfers.js';

/**
 * `shardflake bench cross --contended`: transfers among a few hot accounts on two servers, in both directions, by
 * several clients (transfers.ts) — the load that deadlocked for ever before the detector. Two sides, one after
 * the other on the same servers and data:
 * - detector: the router's defaults (a deadlock across servers is broken after about 1 s of waiting);
 * - lock_timeout only: the detector off (`deadlockCheckMs: 0`), the waits bounded by lock_timeout alone (10 s),
 *   which is what a router without a detector can do (Vitess bounds its lock waits this way).
 * Each side: transfers committed per second, deadlocks broken (calls that failed with DEADLOCK), lock timeouts,
 * p50, p99 and the longest call, and whether the total money is what it was. No retries: a victim is a failed
 * call, so each call's time is one attempt's.
 */
export interface ContendedOptions {
  clients?: number;
  /** Hot accounts on each of the two servers. */
  hotAccounts?: number;
  /** Seconds per side. */
  seconds?: number;
  fsync?: boolean;
  /** lock_timeout of the lock_timeout-only side (default: the router's, 10 000 ms); a test shortens it. */
  lockTimeoutMs?: number;
  onProgress?: (message: string) => void;
}

export interface ContendedSide {
  name: string;
  committedPerSecond: number;
  calls: number;
  committed: number;
  deadlocks: number;
  lockTimeouts: number;
  /** Failures by code other than DEADLOCK and LOCK_TIMEOUT. */
  otherFailures: Record<string, number>;
  /** Calls still unsettled 60 s after the side's end (a hang). */
  hung: number;
  p50Ms: number;
  p99Ms: number;
  longestMs: number;
  /** The sum of every balance equals the sum before the side ran. */
  conserved: boolean;
}

export interface ContendedResult {
  clients: number;
  hotAccounts: number;
  seconds: number;
  fsync: boolean;
  sides: ContendedSide[];
}

const SIDES: { name: string; options: RouterOptions['transactions'] }[] = [
  { name: 'detector (defaults)', options: {} },
  { name: 'lock_timeout only (detector off)', options: { deadlockCheckMs: 0 } },
];

export async function benchCrossContended(options: ContendedOptions = {}): Promise<ContendedResult> {
  const clients = options.clients ?? 8;
  const hotAccounts = options.hotAccounts ?? 4;
  const seconds = options.seconds ?? 15;
  const fsync = options.fsync ?? true;
  const say = options.onProgress ?? (() => {});
  say(`starting 2 embedded servers (fsync ${fsync ? 'on' : 'off'}), ${hotAccounts} hot accounts on each`);
  const cluster = await startTransferCluster({ hotAccounts, fsync });
  try {
    const sides: ContendedSide[] = [];
    for (const side of SIDES) {
      const router = await createRouter(cluster.config, {
        listen: false,
        poolSize: clients,
        transactions: {
          recovery: false,
          ...side.options,
          ...(options.lockTimeoutMs !== undefined && side.options?.deadlockCheckMs === 0
            ? { lockTimeoutMs: options.lockTimeoutMs }
            : {}),
        },
      });
      try {
        const sum = async () => (await balances(router, cluster)).flat().reduce((x, y) => x + y, 0n);
        const before = await sum();
        say(`${side.name}: ${clients} clients for ${seconds} s`);
        const started = performance.now();
        const calls = await runTransfers(router, cluster, { clients, ms: seconds * 1000 });
        const elapsed = (performance.now() - started) / 1000;
        const settled = calls.filter((c) => c.ended !== undefined);
        const count = (outcome: string) => settled.filter((c) => c.outcome === outcome).length;
        const durations = settled.map((c) => (c.ended as number) - c.started);
        const otherFailures: Record<string, number> = {};
        for (const c of settled)
          if (!['committed', 'DEADLOCK', 'LOCK_TIMEOUT'].includes(c.outcome as string))
            otherFailures[c.outcome as string] = (otherFailures[c.outcome as string] ?? 0) + 1;
        const result: ContendedSide = {
          name: side.name,
          committedPerSecond: count('committed') / elapsed,
          calls: calls.length,
          committed: count('committed'),
          deadlocks: count('DEADLOCK'),
          lockTimeouts: count('LOCK_TIMEOUT'),
          otherFailures,
          hung: calls.length - settled.length,
          p50Ms: durations.length ? percentile(durations, 50) : 0,
          p99Ms: durations.length ? percentile(durations, 99) : 0,
          longestMs: durations.length ? Math.max(...durations) : 0,
          conserved: (await sum()) === before,
        };
        sides.push(result);
        say(
          `${side.name}: ${Math.round(result.committedPerSecond)} transfers/s, ${result.deadlocks} deadlocks, longest ${Math.round(result.longestMs)} ms`,
        );
      } finally {
        await router.close();
      }
    }
    return { clients, hotAccounts, seconds, fsync, sides };
  } finally {
    await cluster.close();
  }
}

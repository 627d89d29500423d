import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { createRestorePoint } from 'shardflake/internal/backups/restore-point.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { createRouter, type Router } from 'shardflake/internal/router/router.js';
import { median, percentile } from './stats.js';

/**
 * `shardflake bench restore-point`: what a restore point costs the commits running while it is taken. On N embedded
 * servers (fsync on), with two shards per server, `clients` workers make `bench cross`-style transfers across two
 * servers (two-phase commit) and `localClients` workers transfers between the two shards of one server (one local
 * transaction), without pause. After a warm-up and a stretch with no restore point (the baseline), a restore point
 * is taken every `intervalMs`, `rounds` times.
 *
 * Every transfer is timed; one whose run overlaps a restore point call (from its first connection to its last
 * catalog write, wider than the pause itself) counts as "during", the others as the baseline. The pause a commit
 * saw is its latency minus the baseline median of its kind: the longest over the "during" cross-server transfers
 * is the figure (target ≤ 100 ms), with the baseline's own longest next to it as the noise floor. Same-server
 * transfers take no lock and should not see it: their "during" latencies against their baseline.
 */
export interface RestorePointBenchOptions {
  /** Server counts to run, one cluster each (default [2, 4]). */
  servers?: number[];
  /** Restore points per cluster (default 20). */
  rounds?: number;
  /** Milliseconds between restore points (default 300). */
  intervalMs?: number;
  /** Cross-server transfer workers (default 4). */
  clients?: number;
  /** Same-server transfer workers (default 2). */
  localClients?: number;
  /** Accounts per shard (default 1000). */
  accounts?: number;
  onProgress?: (message: string) => void;
}

export interface KindResult {
  /** Transfers outside every restore point, and their latency (ms). */
  baseline: { count: number; p50: number; p99: number; max: number };
  /** Transfers that overlapped a restore point, and their latency (ms). */
  during: { count: number; p50: number; p99: number; max: number };
  /** Longest latency minus the baseline median, during restore points and (the noise) outside them. */
  longestDelayDuring: number;
  longestDelayBaseline: number;
}

export interface RestorePointSizeResult {
  servers: number;
  restorePoints: number;
  /** The library's own measure of each point's hold (from the lock requests to their release), ms. */
  heldMs: { p50: number; max: number };
  /** Restore points that needed more than one attempt. */
  retried: number;
  cross: KindResult;
  local: KindResult;
}

export interface RestorePointBenchResult {
  rounds: number;
  intervalMs: number;
  clients: number;
  localClients: number;
  accounts: number;
  sizes: RestorePointSizeResult[];
}

const TABLE = 'CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL)';
const DEBIT = 'UPDATE accounts SET balance = balance - 1 WHERE id = $1';
const CREDIT = 'UPDATE accounts SET balance = balance + 1 WHERE id = $1';

interface Timed {
  kind: 'cross' | 'local';
  start: number;
  end: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function summary(values: number[]): { count: number; p50: number; p99: number; max: number } {
  if (values.length === 0) return { count: 0, p50: 0, p99: 0, max: 0 };
  const round = (v: number) => Math.round(v * 100) / 100;
  return {
    count: values.length,
    p50: round(percentile(values, 50)),
    p99: round(percentile(values, 99)),
    max: round(Math.max(...values)),
  };
}

/** One cluster of `n` servers: workers, a baseline stretch, then the restore points. */
async function runSize(
  n: number,
  o: Required<Omit<RestorePointBenchOptions, 'onProgress' | 'servers'>>,
  say: (m: string) => void,
): Promise<RestorePointSizeResult> {
  say(`starting ${n} embedded servers`);
  const servers: EmbeddedServer[] = await startEmbeddedServers(n, { settings: { fsync: 'on' } });
  try {
    const config = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: 2 * n, // shards 2k and 2k + 1 on server k
        tables: { accounts: TABLE },
      },
      'bench restore-point',
    );
    await initCluster(config);
    const router: Router = await createRouter(config, {
      listen: false,
      poolSize: o.clients + o.localClients + 2,
      transactions: { recovery: false },
    });
    try {
      for (let shard = 0; shard < 2 * n; shard++)
        await router.withShard({ shard }, (s) =>
          s.query('INSERT INTO accounts SELECT g, 1000000 FROM generate_series(0, $1::int - 1) g', [
            o.accounts,
          ]),
        );
      const timed: Timed[] = [];
      let stop = false;
      let record = false;
      const account = () => Math.floor(Math.random() * o.accounts);
      const transferBetween = (x: number, y: number) => {
        // The lower shard first in every transfer: two transfers never wait on each other in a circle.
        const [first, second] = x < y ? [x, y] : [y, x];
        return router.withShards([{ shard: first }, { shard: second }], async ([p, q]) => {
          await p?.query(DEBIT, [account()]);
          await q?.query(CREDIT, [account()]);
        });
      };
      const worker = async (kind: Timed['kind']) => {
        while (!stop) {
          const k = Math.floor(Math.random() * n);
          let pair: [number, number];
          if (kind === 'local') pair = [2 * k, 2 * k + 1];
          else {
            const other = (k + 1 + Math.floor(Math.random() * (n - 1))) % n;
            pair = [2 * k + Math.floor(Math.random() * 2), 2 * other + Math.floor(Math.random() * 2)];
          }
          const start = performance.now();
          await transferBetween(...pair);
          if (record) timed.push({ kind, start, end: performance.now() });
        }
      };
      const workers = [
        ...Array.from({ length: o.clients }, () => worker('cross')),
        ...Array.from({ length: o.localClients }, () => worker('local')),
      ];
      await sleep(1000); // warm-up: pools full, caches warm
      record = true;
      await sleep(Math.max(1000, o.rounds * o.intervalMs)); // the baseline stretch
      const windows: { start: number; end: number }[] = [];
      const held: number[] = [];
      let retried = 0;
      for (let round = 0; round < o.rounds; round++) {
        const start = performance.now();
        const point = await createRestorePoint(config, `bench-${n}-${process.pid}-${Date.now()}-${round}`);
        windows.push({ start, end: performance.now() });
        held.push(point.heldMs);
        if (point.attempts > 1) retried++;
        await sleep(o.intervalMs);
      }
      stop = true;
      await Promise.all(workers);
      say(`${n} servers: ${timed.length} transfers timed, ${windows.length} restore points`);
      const overlaps = (t: Timed) => windows.some((w) => t.start < w.end && t.end > w.start);
      const kind = (which: Timed['kind']): KindResult => {
        const mine = timed.filter((t) => t.kind === which);
        const during = mine.filter(overlaps).map((t) => t.end - t.start);
        const baseline = mine.filter((t) => !overlaps(t)).map((t) => t.end - t.start);
        const base = summary(baseline);
        const during_ = summary(during);
        const round = (v: number) => Math.round(v * 100) / 100;
        return {
          baseline: base,
          during: during_,
          longestDelayDuring: round(during_.max - base.p50),
          longestDelayBaseline: round(base.max - base.p50),
        };
      };
      return {
        servers: n,
        restorePoints: windows.length,
        heldMs: { p50: median(held), max: Math.max(...held) },
        retried,
        cross: kind('cross'),
        local: kind('local'),
      };
    } finally {
      await router.close();
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop().catch(() => {})));
  }
}

export async function benchRestorePoint(
  options: RestorePointBenchOptions = {},
): Promise<RestorePointBenchResult> {
  const o = {
    rounds: options.rounds ?? 20,
    intervalMs: options.intervalMs ?? 300,
    clients: options.clients ?? 4,
    localClients: options.localClients ?? 2,
    accounts: options.accounts ?? 1000,
  };
  const say = options.onProgress ?? (() => {});
  const sizes: RestorePointSizeResult[] = [];
  for (const n of options.servers ?? [2, 4]) sizes.push(await runSize(n, o, say));
  return { ...o, sizes };
}

import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import pg from 'pg';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { createRouter, type Router } from 'shardflake/internal/router/router.js';
import { median, percentile } from './stats.js';

/**
 * `shardflake bench cross`: what a transfer costs when it crosses shards, against the same two updates in one
 * local transaction, side by side in one run on two embedded servers (fsync on, synchronous_commit on: a commit
 * waits for its WAL flush, which is what two-phase commit multiplies).
 *
 * A transfer moves 1 from one account to another: `UPDATE accounts SET balance = balance - 1 WHERE id = $1` in one
 * shard, `… + 1 …` in the other, with accounts picked at random (few conflicts).
 * - baseline: one withShard doing both updates in one shard — one local transaction (4 round trips: BEGIN, the
 *   two updates, COMMIT);
 * - (a) withShards over two shards on one server — one local transaction shared by both sessions, target ≥ 0.95×
 *   (3 round trips: BEGIN and the bounds ride with the first update, the switch of search_path with the second);
 * - (b) withShards over two shards on two servers — two-phase commit with the last-agent saving: PREPARE on b,
 *   then the decision row and COMMIT on a in one round trip, then COMMIT PREPARED on b; target ≥ 0.45× (5 round
 *   trips, three of them commits to disk one after the other);
 * - (b0) the same as (b) on a router with no deadlock detector and no bounds on waits (`deadlockCheckMs`,
 *   `lockTimeoutMs`, `idleTimeoutMs` all 0: no tag, no settings sent with BEGIN, nothing watched), as withShards
 *   was before them: (b) against (b0) is what the detector costs when nothing waits.
 *
 * Common path first: plain parameterised statements (no named prepared statements) on a cold pool — each side's
 * first `coldTransfers` on a router made for it, connection setup included. Then the warm measure: the sides
 * alternate in short slices every round (A B C, then C B A), so drift in the machine's load falls on all; each
 * ratio is the median of the per-round ratios with the spread next to it. Latencies: p50 and p99 over all warm
 * transfers of a side.
 */
export interface CrossBenchOptions {
  rounds?: number;
  sliceMs?: number;
  clients?: number;
  /** Accounts per shard. */
  accounts?: number;
  coldTransfers?: number;
  /** fsync on the servers (default true); off shows what the round trips alone cost. */
  fsync?: boolean;
  onProgress?: (message: string) => void;
}

export interface SideResult {
  /** Transfers per second: cold (new router), and warm per round. */
  cold: number;
  warm: number[];
  /** Milliseconds, over every warm transfer. */
  p50: number;
  p99: number;
  coldP50: number;
  coldP99: number;
}

export interface CrossBenchResult {
  rounds: number;
  sliceMs: number;
  clients: number;
  accounts: number;
  fsync: boolean;
  synchronousCommit: string;
  baseline: SideResult;
  oneServer: SideResult;
  twoServers: SideResult;
  twoServersBare: SideResult;
  /** (a) oneServer / baseline; (b) twoServers / baseline: median of round ratios, spread, and the cold ratio. */
  ratioOneServer: { ratio: number; min: number; max: number; cold: number };
  ratioTwoServers: { ratio: number; min: number; max: number; cold: number };
  /** (b) against (b0): the detector and the bounds when nothing waits. */
  ratioDetector: { ratio: number; min: number; max: number; cold: number };
  /** Round trips of one warm transfer per side (queries given to the router's connections; a batch is one). */
  roundTrips: Record<'baseline' | 'oneServer' | 'twoServers' | 'twoServersBare', number>;
}

/** The fewest queries any pg client of this process was given during one `transfer`, over five. */
async function roundTripsOf(transfer: () => Promise<unknown>): Promise<number> {
  const original = pg.Client.prototype.query;
  let fewest = Number.POSITIVE_INFINITY;
  try {
    for (let i = 0; i < 5; i++) {
      let queries = 0;
      pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
        queries++;
        return (original as (...a: unknown[]) => unknown).apply(this, args);
      } as typeof original;
      await transfer();
      pg.Client.prototype.query = original;
      fewest = Math.min(fewest, queries);
    }
  } finally {
    pg.Client.prototype.query = original;
  }
  return fewest;
}

const TABLE = 'CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL)';
const DEBIT = 'UPDATE accounts SET balance = balance - 1 WHERE id = $1';
const CREDIT = 'UPDATE accounts SET balance = balance + 1 WHERE id = $1';

type Transfer = (router: Router, from: number, to: number) => Promise<unknown>;

// Shards 0 and 1 live on server a, 2 and 3 on server b (init places shards in contiguous blocks).
const SIDES: Record<'baseline' | 'oneServer' | 'twoServers' | 'twoServersBare', Transfer> = {
  // Both accounts in one shard: the lower id first, or two transfers between the same accounts in opposite
  // directions would deadlock in PostgreSQL (the sides over two shards always lock shard 0's row first).
  baseline: (router, from, to) =>
    router.withShard({ shard: 0 }, async (s) => {
      if (from <= to) {
        await s.query(DEBIT, [from]);
        await s.query(CREDIT, [to]);
      } else {
        await s.query(CREDIT, [to]);
        await s.query(DEBIT, [from]);
      }
    }),
  oneServer: (router, from, to) =>
    router.withShards([{ shard: 0 }, { shard: 1 }], async ([x, y]) => {
      await x?.query(DEBIT, [from]);
      await y?.query(CREDIT, [to]);
    }),
  twoServers: (router, from, to) =>
    router.withShards([{ shard: 0 }, { shard: 2 }], async ([x, y]) => {
      await x?.query(DEBIT, [from]);
      await y?.query(CREDIT, [to]);
    }),
  twoServersBare: (router, from, to) => SIDES.twoServers(router, from, to),
};

/** (b0)'s router: no detector, no bounds (see the top of this file). */
const BARE = { deadlockCheckMs: 0, lockTimeoutMs: 0, idleTimeoutMs: 0 };

/** Runs transfers with `clients` workers until `count` are done or `ms` have passed; per-transfer latencies. */
async function run(
  router: Router,
  transfer: Transfer,
  clients: number,
  accounts: number,
  limit: { count?: number; ms?: number },
  latencies: number[],
): Promise<number> {
  let done = 0;
  let started = 0;
  const begin = performance.now();
  const until = begin + (limit.ms ?? Number.POSITIVE_INFINITY);
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < until && started < (limit.count ?? Number.POSITIVE_INFINITY)) {
        started++;
        const from = Math.floor(Math.random() * accounts);
        const to = Math.floor(Math.random() * accounts);
        const t = performance.now();
        await transfer(router, from, to);
        latencies.push(performance.now() - t);
        done++;
      }
    }),
  );
  return done / ((performance.now() - begin) / 1000);
}

export async function benchCross(options: CrossBenchOptions = {}): Promise<CrossBenchResult> {
  const rounds = options.rounds ?? 10;
  const sliceMs = options.sliceMs ?? 1000;
  const clients = options.clients ?? 4;
  const accounts = options.accounts ?? 1000;
  const coldTransfers = options.coldTransfers ?? 200;
  const fsync = options.fsync ?? true;
  const say = options.onProgress ?? (() => {});
  say(`starting 2 embedded servers (fsync ${fsync ? 'on' : 'off'})`);
  const servers: EmbeddedServer[] = await startEmbeddedServers(2, {
    settings: { fsync: fsync ? 'on' : 'off' },
  });
  try {
    const config = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: 4,
        tables: { accounts: TABLE },
      },
      'bench cross',
    );
    await initCluster(config);
    const routerOptions = { listen: false, poolSize: clients, transactions: { recovery: false } };
    const loader = await createRouter(config, routerOptions);
    let synchronousCommit = 'on';
    try {
      for (let shard = 0; shard < 4; shard++)
        await loader.withShard({ shard }, async (s) => {
          await s.query('INSERT INTO accounts SELECT g, 1000000 FROM generate_series(0, $1::int - 1) g', [
            accounts,
          ]);
          synchronousCommit =
            (await s.query<{ s: string }>("SELECT current_setting('synchronous_commit') AS s")).rows[0]?.s ??
            '?';
        });
    } finally {
      await loader.close();
    }

    const names = Object.keys(SIDES) as (keyof typeof SIDES)[];
    const cold = {} as Record<keyof typeof SIDES, { rate: number; latencies: number[] }>;
    const routers = {} as Record<keyof typeof SIDES, Router>;
    for (const name of names) {
      // Cold: a router made for this side, its pool empty.
      routers[name] = await createRouter(
        config,
        name === 'twoServersBare'
          ? { ...routerOptions, transactions: { ...routerOptions.transactions, ...BARE } }
          : routerOptions,
      );
      const latencies: number[] = [];
      const rate = await run(
        routers[name],
        SIDES[name],
        clients,
        accounts,
        { count: coldTransfers },
        latencies,
      );
      cold[name] = { rate, latencies };
      say(`cold ${name}: ${Math.round(rate)} transfers/s`);
    }
    try {
      const warm = Object.fromEntries(
        names.map((n) => [n, { rates: [] as number[], latencies: [] as number[] }]),
      );
      for (let round = 0; round < rounds; round++) {
        const order = round % 2 === 0 ? names : [...names].reverse();
        for (const name of order) {
          const side = warm[name] as { rates: number[]; latencies: number[] };
          side.rates.push(
            await run(routers[name], SIDES[name], clients, accounts, { ms: sliceMs }, side.latencies),
          );
        }
        say(
          `round ${round + 1}/${rounds}: (a) ${((warm.oneServer?.rates.at(-1) ?? 0) / (warm.baseline?.rates.at(-1) ?? 1)).toFixed(3)}×, (b) ${((warm.twoServers?.rates.at(-1) ?? 0) / (warm.baseline?.rates.at(-1) ?? 1)).toFixed(3)}×`,
        );
      }
      const side = (name: keyof typeof SIDES): SideResult => {
        const w = warm[name] as { rates: number[]; latencies: number[] };
        return {
          cold: cold[name].rate,
          warm: w.rates,
          p50: percentile(w.latencies, 50),
          p99: percentile(w.latencies, 99),
          coldP50: percentile(cold[name].latencies, 50),
          coldP99: percentile(cold[name].latencies, 99),
        };
      };
      const baseline = side('baseline');
      const ratio = (candidate: SideResult, against = baseline) => {
        const each = candidate.warm.map((c, i) => c / (against.warm[i] as number));
        return {
          ratio: median(each),
          min: Math.min(...each),
          max: Math.max(...each),
          cold: candidate.cold / against.cold,
        };
      };
      const roundTrips = {} as CrossBenchResult['roundTrips'];
      for (const name of names) roundTrips[name] = await roundTripsOf(() => SIDES[name](routers[name], 1, 2));
      const oneServer = side('oneServer');
      const twoServers = side('twoServers');
      const twoServersBare = side('twoServersBare');
      return {
        rounds,
        sliceMs,
        clients,
        accounts,
        fsync,
        synchronousCommit,
        baseline,
        oneServer,
        twoServers,
        twoServersBare,
        ratioOneServer: ratio(oneServer),
        ratioTwoServers: ratio(twoServers),
        ratioDetector: ratio(twoServers, twoServersBare),
        roundTrips,
      };
    } finally {
      await Promise.all(Object.values(routers).map((r) => r.close()));
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop().catch(() => {})));
  }
}

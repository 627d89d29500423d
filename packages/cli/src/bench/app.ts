import { cpus } from 'node:os';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { copyFrom } from 'shardflake/internal/postgres/copy-streams.js';
import { quoteIdent } from 'shardflake/internal/postgres/identifier.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { shardForKey } from 'shardflake/internal/routing/shard-key.js';
import { startPhotosCluster } from './photos-cluster.js';
import { median, tasksPerSecond } from './stats.js';

/**
 * `bench app`: what the application layer costs, side by side in one run on two embedded servers, in alternating
 * rounds (the machine is shared, so drift must hit both sides; the spread of the rounds is reported).
 * - sessions: a two-statement transaction (INSERT a photo, count the user's photos) through `withShard` vs the
 *   same transaction with plain `pg` on the right server (BEGIN, the two statements schema-qualified, COMMIT).
 * - bulk: `insertMany` of many rows vs the same rows as single-row `router.insert` calls (16 in flight).
 * - copy: per shard, a multi-row `INSERT … RETURNING id` vs `COPY` with ids drawn first by `next_id()` — the
 *   measurement behind insertMany's choice of INSERT.
 * - example app: requests/s and p50/p99 of examples/instagram's workload (when `app` is given; in a clone).
 */
export interface AppBenchOptions {
  shards?: number;
  rounds?: number;
  /** Transactions per session round (default 2000). */
  transactions?: number;
  /** Rows per bulk round (default 20 000; the single-row side inserts a tenth of them). */
  rows?: number;
  concurrency?: number;
  /** Runs the example application's workload (on its own servers) and reports its latency. */
  app?: () => Promise<AppWorkloadResult>;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface AppWorkloadResult {
  requests: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

export interface Sides {
  /** The measured side per round (per second). */
  rounds: number[];
  baseline: number[];
  median: number;
  baselineMedian: number;
  ratio: number;
  /** Ratios of the rounds, lowest and highest. */
  spread: [number, number];
}

export interface AppBenchResult {
  machine: { cpus: number; node: string };
  shards: number;
  rounds: number;
  concurrency: number;
  /** Transactions/s: withShard vs plain pg, in alternating rounds. */
  sessions: Sides & { transactions: number };
  /** Transactions/s: withShard vs plain pg running at the same time, half of the clients each, 2 s windows. */
  sessionsTogether: Sides;
  /** Rows/s: insertMany vs single-row router inserts. */
  bulk: Sides & { rows: number; singleRows: number };
  /** Rows/s: COPY (ids drawn first) vs multi-row INSERT … RETURNING, per shard of `rowsPerShard`. */
  copy: Sides & { rowsPerShard: number };
  app?: AppWorkloadResult;
}

const DEFAULTS = { shards: 64, rounds: 5, transactions: 2000, rows: 20_000, concurrency: 16 };

function sides(measured: number[], baseline: number[]): Sides {
  const ratios = measured.map((m, i) => m / (baseline[i] as number));
  const m = median(measured);
  const b = median(baseline);
  return {
    rounds: measured.map(Math.round),
    baseline: baseline.map(Math.round),
    median: Math.round(m),
    baselineMedian: Math.round(b),
    ratio: Number((m / b).toFixed(3)),
    spread: [Number(Math.min(...ratios).toFixed(3)), Number(Math.max(...ratios).toFixed(3))],
  };
}

/** Runs both sides at once, `perSide` clients each, for `ms`; returns each side's tasks per second. */
async function together(
  perSide: number,
  ms: number,
  measured: (i: bigint) => Promise<unknown>,
  baseline: (i: bigint) => Promise<unknown>,
): Promise<readonly [number, number]> {
  const end = performance.now() + ms;
  const counts = [0, 0];
  let next = 0n;
  const client = async (side: 0 | 1) => {
    const task = side === 0 ? measured : baseline;
    while (performance.now() < end) {
      await task(next++);
      counts[side] = (counts[side] as number) + 1;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: 2 * perSide }, (_, i) => client((i % 2) as 0 | 1)));
  const seconds = (performance.now() - started) / 1000;
  return [(counts[0] as number) / seconds, (counts[1] as number) / seconds] as const;
}

/** Runs the two sides of a round in alternating order; returns [measured, baseline]. */
async function alternate(round: number, measured: () => Promise<number>, baseline: () => Promise<number>) {
  if (round % 2 === 0) {
    const m = await measured();
    return [m, await baseline()] as const;
  }
  const b = await baseline();
  return [await measured(), b] as const;
}

export async function runAppBench(options: AppBenchOptions = {}): Promise<AppBenchResult> {
  const opts = { ...DEFAULTS, ...options };
  const progress = opts.onProgress ?? (() => {});
  const cluster = await startPhotosCluster({
    shards: opts.shards,
    concurrency: opts.concurrency,
    onProgress: progress,
  });
  try {
    const { servers, config, map, pools } = cluster;
    const router = await createRouter(config, { poolSize: opts.concurrency });
    const placementOf = (user: bigint) =>
      map.shards[shardForKey(user, opts.shards)] as { server: string; schema: string };
    const target = (schema: string) => `${quoteIdent(schema)}.${quoteIdent('photos')}`;
    try {
      // Sessions: the same two statements, unqualified in the session, schema-qualified on the direct side.
      const session = (user: bigint) =>
        router.withShard({ key: user }, async (s) => {
          await s.query('INSERT INTO photos (user_id, caption) VALUES ($1, $2) RETURNING id', [
            user,
            'session',
          ]);
          return s.query('SELECT count(*) AS n FROM photos WHERE user_id = $1', [user]);
        });
      const direct = async (user: bigint) => {
        const { server, schema } = placementOf(user);
        const client = await (pools.get(server) as pg.Pool).connect();
        try {
          await client.query('BEGIN');
          await client.query(
            `INSERT INTO ${target(schema)} (user_id, caption) VALUES ($1, $2) RETURNING id`,
            [user, 'direct'],
          );
          const result = await client.query(
            `SELECT count(*) AS n FROM ${target(schema)} WHERE user_id = $1`,
            [user],
          );
          await client.query('COMMIT');
          return result;
        } finally {
          client.release();
        }
      };
      // Warm both sides: pools, and every shard's table in the backends' caches.
      await tasksPerSecond(opts.shards * 4, opts.concurrency, (i) => session(BigInt(i)));
      await tasksPerSecond(opts.shards * 4, opts.concurrency, (i) => direct(BigInt(i)));
      const sessionRates: number[] = [];
      const directRates: number[] = [];
      for (let round = 0; round < opts.rounds; round++) {
        const [m, b] = await alternate(
          round,
          () => tasksPerSecond(opts.transactions, opts.concurrency, (i) => session(BigInt(i))),
          () => tasksPerSecond(opts.transactions, opts.concurrency, (i) => direct(BigInt(i))),
        );
        sessionRates.push(m);
        directRates.push(b);
        progress('sessions', round + 1, opts.rounds);
      }
      // The same comparison with both sides running at the same time (half the clients each, same time window):
      // whatever else loads the machine then hits both sides alike, which alternating rounds only approximate.
      const togetherSession: number[] = [];
      const togetherDirect: number[] = [];
      for (let round = 0; round < opts.rounds; round++) {
        const [m, b] = await together(opts.concurrency / 2, 2000, session, direct);
        togetherSession.push(m);
        togetherDirect.push(b);
        progress('together', round + 1, opts.rounds);
      }

      // Bulk: insertMany of `rows` rows vs a tenth of them as single-row inserts (rates are per row).
      const singleRows = Math.max(1, Math.floor(opts.rows / 10));
      const bulkRates: number[] = [];
      const singleRates: number[] = [];
      for (let round = 0; round < opts.rounds; round++) {
        const rows = Array.from({ length: opts.rows }, (_, i) => ({ user_id: BigInt(i), caption: 'bulk' }));
        const [m, b] = await alternate(
          round,
          async () => {
            const started = performance.now();
            await router.insertMany('photos', rows, { key: (r) => r.user_id });
            return opts.rows / ((performance.now() - started) / 1000);
          },
          () =>
            tasksPerSecond(singleRows, opts.concurrency, (i) =>
              router.insert('photos', { user_id: BigInt(i), caption: 'single' }, { key: BigInt(i) }),
            ),
        );
        bulkRates.push(m);
        singleRates.push(b);
        progress('bulk', round + 1, opts.rounds);
      }

      // COPY vs multi-row INSERT, one shard's rows at a time on its server.
      const rowsPerShard = 1000;
      const copyRates: number[] = [];
      const insertRates: number[] = [];
      const client = await connect(servers[0]?.url as string);
      const shardsOnA = map.shards.filter((s) => s.server === 'a').slice(0, 8);
      try {
        const viaInsert = async () => {
          const started = performance.now();
          for (const { schema } of shardsOnA) {
            const values: unknown[] = [];
            const tuples: string[] = [];
            for (let i = 0; i < rowsPerShard; i++) {
              values.push(BigInt(i), 'insert');
              tuples.push(`($${2 * i + 1}, $${2 * i + 2})`);
            }
            await client.query(
              `INSERT INTO ${target(schema)} (user_id, caption) VALUES ${tuples.join(', ')} RETURNING id`,
              values,
            );
          }
          return (rowsPerShard * shardsOnA.length) / ((performance.now() - started) / 1000);
        };
        const viaCopy = async () => {
          const started = performance.now();
          for (const { schema } of shardsOnA) {
            // COPY returns no ids: draw them first, then write them explicitly.
            const { rows } = await client.query(
              `SELECT ${quoteIdent(schema)}.next_id() AS id FROM generate_series(1, $1)`,
              [rowsPerShard],
            );
            const lines = rows.map((r: { id: bigint }, i) => `${r.id}\t${i}\tcopy\n`).join('');
            await pipeline(
              [lines],
              client.query(copyFrom(`COPY ${target(schema)} (id, user_id, caption) FROM STDIN`)),
            );
          }
          return (rowsPerShard * shardsOnA.length) / ((performance.now() - started) / 1000);
        };
        await viaInsert();
        await viaCopy();
        for (let round = 0; round < opts.rounds; round++) {
          const [m, b] = await alternate(round, viaCopy, viaInsert);
          copyRates.push(m);
          insertRates.push(b);
          progress('copy', round + 1, opts.rounds);
        }
      } finally {
        await client.end();
      }

      const app = opts.app ? await opts.app() : undefined;
      return {
        machine: { cpus: cpus().length, node: process.version },
        shards: opts.shards,
        rounds: opts.rounds,
        concurrency: opts.concurrency,
        sessions: { ...sides(sessionRates, directRates), transactions: opts.transactions },
        sessionsTogether: sides(togetherSession, togetherDirect),
        bulk: { ...sides(bulkRates, singleRates), rows: opts.rows, singleRows },
        copy: { ...sides(copyRates, insertRates), rowsPerShard },
        ...(app ? { app } : {}),
      };
    } finally {
      await router.close();
    }
  } finally {
    await cluster.stop();
  }
}

import type pg from 'pg';
import { quoteIdent } from 'shardflake/internal/postgres/identifier.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { shardForKey } from 'shardflake/internal/routing/shard-key.js';
import { startPhotosCluster } from './photos-cluster.js';
import { median, percentile, tasksPerSecond } from './stats.js';

/**
 * `bench cluster`: what the cluster costs, measured side by side in one run on two embedded servers.
 * - init: time to create `initShards` logical shards (schema + generator + one table) on two servers.
 * - inserts: the same single-row inserts through the router and straight to the right server with `pg` (same
 *   pools, same statement text, same concurrency), in alternating rounds so drift hits both; the ratio is the
 *   router's cost.
 * - feed: latency of "latest 20 photos of 500 users" over all shards, merged by the router.
 */
export interface ClusterBenchOptions {
  initShards?: number;
  /** Rows per insert round (default 4000). */
  rows?: number;
  /** Rounds per side (default 3). */
  rounds?: number;
  /** Parallel inserts in flight (default 16). */
  concurrency?: number;
  feedUsers?: number;
  feedRuns?: number;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface ClusterBenchResult {
  machine: { cpus: number; node: string };
  init: {
    logicalShards: number;
    servers: number;
    seconds: number;
    shardsPerSecond: number;
    batchSize: number;
  };
  inserts: {
    rows: number;
    rounds: number;
    concurrency: number;
    routerPerSecond: number[];
    directPerSecond: number[];
    routerMedian: number;
    directMedian: number;
    ratio: number;
  };
  feed: { users: number; shardsTouched: number; limit: number; runs: number; p50Ms: number; p99Ms: number };
}

/** Shards created per statement batch by init (what `init.batchSize` reports). */
const INIT_BATCH = 64;

const DEFAULTS = { initShards: 8192, rows: 3000, rounds: 6, concurrency: 16, feedUsers: 500, feedRuns: 50 };

export async function runClusterBench(options: ClusterBenchOptions = {}): Promise<ClusterBenchResult> {
  const opts = { ...DEFAULTS, ...options };
  const progress = opts.onProgress ?? (() => {});
  const cluster = await startPhotosCluster({
    shards: opts.initShards,
    concurrency: opts.concurrency,
    batchSize: INIT_BATCH,
    onProgress: progress,
  });
  try {
    const { servers, config, map, pools, init } = cluster;
    const texts = map.shards.map(
      (s) =>
        `INSERT INTO ${quoteIdent(s.schema)}.${quoteIdent('photos')} (${quoteIdent('user_id')}, ${quoteIdent('caption')}) VALUES ($1, $2) RETURNING id`,
    );
    const router = await createRouter(config, { poolSize: opts.concurrency });
    const routerRates: number[] = [];
    const directRates: number[] = [];
    try {
      // Warm both sides' pools and the servers' caches.
      await tasksPerSecond(500, opts.concurrency, (i) =>
        router.insert('photos', { user_id: BigInt(i), caption: 'warm' }, { key: BigInt(i) }),
      );
      for (let round = 0; round < opts.rounds; round++) {
        const offset = BigInt(round * opts.rows);
        const viaRouter = () =>
          tasksPerSecond(opts.rows, opts.concurrency, (i) => {
            const user = offset + BigInt(i);
            return router.insert('photos', { user_id: user, caption: 'router' }, { key: user });
          });
        const direct = () =>
          tasksPerSecond(opts.rows, opts.concurrency, (i) => {
            const user = offset + BigInt(i);
            const shard = shardForKey(user, map.shards.length);
            const placement = map.shards[shard] as { server: string };
            return (pools.get(placement.server) as pg.Pool).query(texts[shard] as string, [user, 'direct']);
          });
        // Alternate which side goes first, so a slow patch of the disk does not always hit the same side.
        if (round % 2 === 0) {
          routerRates.push(await viaRouter());
          directRates.push(await direct());
        } else {
          directRates.push(await direct());
          routerRates.push(await viaRouter());
        }
        progress('inserts', round + 1, opts.rounds);
      }

      const users = Array.from({ length: opts.feedUsers }, (_, i) => BigInt(i * 7));
      const latencies: number[] = [];
      for (let run = 0; run < opts.feedRuns; run++) {
        const started = performance.now();
        await router.feed('photos', { column: 'user_id', keys: users, limit: 20 });
        latencies.push(performance.now() - started);
        progress('feed', run + 1, opts.feedRuns);
      }
      const routerMedian = median(routerRates);
      const directMedian = median(directRates);
      return {
        machine: { cpus: (await import('node:os')).cpus().length, node: process.version },
        init: {
          logicalShards: init.logicalShards,
          servers: servers.length,
          seconds: init.durationMs / 1000,
          shardsPerSecond: init.logicalShards / (init.durationMs / 1000),
          batchSize: INIT_BATCH,
        },
        inserts: {
          rows: opts.rows,
          rounds: opts.rounds,
          concurrency: opts.concurrency,
          routerPerSecond: routerRates.map(Math.round),
          directPerSecond: directRates.map(Math.round),
          routerMedian: Math.round(routerMedian),
          directMedian: Math.round(directMedian),
          ratio: Number((routerMedian / directMedian).toFixed(3)),
        },
        feed: {
          users: opts.feedUsers,
          shardsTouched: new Set(users.map((u) => shardForKey(u, map.shards.length))).size,
          limit: 20,
          runs: opts.feedRuns,
          p50Ms: Number(percentile(latencies, 50).toFixed(2)),
          p99Ms: Number(percentile(latencies, 99).toFixed(2)),
        },
      };
    } finally {
      await router.close();
    }
  } finally {
    await cluster.stop();
  }
}

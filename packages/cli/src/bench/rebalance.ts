import { cpus } from 'node:os';
import { pipeline } from 'node:stream/promises';
import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import type pg from 'pg';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { type ClusterConfig, shardSchema, validateConfig } from 'shardflake/internal/config/config.js';
import { cleanupCluster } from 'shardflake/internal/move/cleanup.js';
import { moveSets, moveShard } from 'shardflake/internal/move/move.js';
import type { MoveResult, VerifyMode } from 'shardflake/internal/move/options.js';
import { rebalanceCluster } from 'shardflake/internal/move/rebalance.js';
import { copyFrom, copyTo } from 'shardflake/internal/postgres/copy-streams.js';
import { qualified } from 'shardflake/internal/postgres/identifier.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { connectServer } from 'shardflake/internal/topology/connections.js';

/**
 * `bench rebalance`: moves at scale, measured side by side in one run with the one-at-a-time moves of before.
 *
 * 1. Rebalance: a cluster of `shards` small shards on two servers gets a third. A sample of shards first moves one
 *    at a time (`moveShard`, one stream and one cutover per shard, as every move did before sets), then the
 *    rebalance moves the rest as sets (one stream per server pair, pairs side by side), then a second sample moves
 *    one at a time again, so a change of machine load during the run shows in the baseline's spread.
 *    Targets: ≤ 0.05 s per shard moved, ≥ 8× faster per shard than one at a time.
 * 2. Big set: shards holding `setRows` rows in all move as one set while one router writer per shard inserts; the
 *    set's copy rate is compared with a plain binary `COPY … TO STDOUT | COPY … FROM STDIN` of the same tables
 *    between the same two servers (into tables with their primary key, as the set's copy), run before and after.
 *    Targets: copy ≥ 0.5× the plain pipe; the longest insert per shard during the move ≤ 100 ms.
 */
export interface RebalanceBenchOptions {
  /** Logical shards of the rebalance (default 1024). */
  shards?: number;
  /** Rows per shard of the rebalance (default 100). */
  rowsPerShard?: number;
  /** Shards moved one at a time, per sample (two samples; default 8). */
  sample?: number;
  /** Rows of the big set, in all (default 2,000,000). */
  setRows?: number;
  /** Shards of the big set (default 8). */
  setShards?: number;
  /** Verification of the big set (default snapshots). */
  verify?: VerifyMode;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export const TARGET_SECONDS_PER_SHARD = 0.05;
export const TARGET_SPEEDUP = 8;
export const TARGET_COPY_RATIO = 0.5;
export const TARGET_PAUSE_MS = 100;

export interface RebalanceBenchResult {
  rebalance: {
    shards: number;
    rowsPerShard: number;
    oneAtATime: { moves: number; secondsPerShard: { median: number; min: number; max: number } };
    sets: {
      moves: number;
      seconds: number;
      secondsPerShard: number;
      sets: number;
      longestPauseMs: number;
      /** Where each set's time went (ms per step, `setSteps` of moveShards: check, prepare, copy, cutover, …). */
      steps: Record<string, number>[];
    };
    speedup: number;
    meetsSecondsTarget: boolean;
    meetsSpeedupTarget: boolean;
  };
  bigSet: {
    rows: number;
    shards: number;
    plainCopy: { rowsPerSecond: number[] };
    setCopy: { rowsPerSecond: number; ms: number };
    ratio: number;
    longestInsertMsPerShard: Record<string, number>;
    longestInsertMs: number;
    normalInsertP50Ms: number;
    cutoverPauseMs: number;
    /** Where the longest cutover pause went (ms): lock wait, catch-up, comparison, generator + fence. */
    longestPauseSteps: Record<string, number>;
    verify: VerifyMode;
    meetsCopyTarget: boolean;
    meetsPauseTarget: boolean;
  };
  machine: { cpus: number; node: string; postgres: string };
}

const DEFAULTS = {
  shards: 1024,
  rowsPerShard: 100,
  sample: 8,
  setRows: 2_000_000,
  setShards: 8,
  verify: 'snapshots' as VerifyMode,
};

const TABLES = {
  items: [
    'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, note text, created_at timestamptz NOT NULL DEFAULT now())',
  ],
};

function clusterConfig(servers: readonly EmbeddedServer[], logicalShards: number): ClusterConfig {
  return validateConfig(
    {
      servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
      catalog: 'a',
      logicalShards,
      epoch: '2024-01-01T00:00:00Z',
      tables: TABLES,
    },
    'bench rebalance',
  );
}

async function fill(config: ClusterConfig, server: string, shards: readonly number[], rows: number) {
  const client = await connectServer(config, server);
  try {
    for (let i = 0; i < shards.length; i += 64) {
      const sql = shards
        .slice(i, i + 64)
        .map(
          (shard) =>
            `INSERT INTO ${qualified(shardSchema(config, shard), 'items')} (user_id, note) SELECT g % 1000, 'row ' || g FROM generate_series(1, ${rows}) g`,
        )
        .join(';\n');
      await client.query(sql);
    }
    await client.query('ANALYZE');
  } finally {
    await client.end();
  }
}

const round = (n: number, digits = 3) => Math.round(n * 10 ** digits) / 10 ** digits;

async function rebalancePart(
  opts: typeof DEFAULTS & RebalanceBenchOptions,
): Promise<RebalanceBenchResult['rebalance']> {
  const servers = await startEmbeddedServers(3);
  try {
    const two = clusterConfig(servers.slice(0, 2), opts.shards);
    await initCluster(two);
    const config = clusterConfig(servers, opts.shards);
    const onA = Array.from({ length: Math.floor(opts.shards / 2) }, (_, i) => i);
    const onB = Array.from({ length: opts.shards - onA.length }, (_, i) => onA.length + i);
    await fill(config, 'a', onA, opts.rowsPerShard);
    await fill(config, 'b', onB, opts.rowsPerShard);
    const single: number[] = [];
    // The samples take shards the rebalance would move anyway (the highest of a and of b).
    const sampleShards = [...onA.slice(-opts.sample), ...onB.slice(-opts.sample)];
    const one = async (shard: number) => {
      const t = performance.now();
      await moveShard(config, shard, 'c');
      single.push((performance.now() - t) / 1000);
      opts.onProgress?.('one at a time', single.length, sampleShards.length);
    };
    for (const shard of sampleShards.slice(0, opts.sample)) await one(shard);
    const started = performance.now();
    let results: MoveResult[] = [];
    const plan = await rebalanceCluster(config, {
      move: { streamsPerServer: 1 },
      onProgress: (done, total) => opts.onProgress?.('rebalance', done, total),
    });
    results = plan.results;
    const seconds = (performance.now() - started) / 1000;
    for (const shard of sampleShards.slice(opts.sample)) {
      // Moved by the rebalance already? Then move it back to b one at a time (the same kind of move).
      const to = results.some((r) => r.shard === shard) ? 'b' : 'c';
      await cleanupCluster(config);
      const t = performance.now();
      await moveShard(config, shard, to);
      single.push((performance.now() - t) / 1000);
      opts.onProgress?.('one at a time', single.length, sampleShards.length);
    }
    const sorted = [...single].sort((x, y) => x - y);
    const median = sorted[Math.floor(sorted.length / 2)] ?? 0;
    const perShard = results.length > 0 ? seconds / results.length : 0;
    return {
      shards: opts.shards,
      rowsPerShard: opts.rowsPerShard,
      oneAtATime: {
        moves: single.length,
        secondsPerShard: {
          median: round(median),
          min: round(sorted[0] ?? 0),
          max: round(sorted.at(-1) ?? 0),
        },
      },
      sets: {
        moves: results.length,
        seconds: round(seconds, 1),
        secondsPerShard: round(perShard, 4),
        sets: new Set(results.map((r) => r.batchId)).size,
        longestPauseMs: round(Math.max(0, ...results.map((r) => r.pauseMs ?? 0)), 1),
        steps: [...new Map(results.map((r) => [r.batchId, r.setSteps ?? {}])).values()],
      },
      speedup: perShard > 0 ? round(median / perShard, 1) : 0,
      meetsSecondsTarget: perShard <= TARGET_SECONDS_PER_SHARD,
      meetsSpeedupTarget: perShard > 0 && median / perShard >= TARGET_SPEEDUP,
    };
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

/** A plain binary COPY pipe of the shards' tables from `from` into fresh tables (same shape, primary key) on `to`. */
async function plainCopy(config: ClusterConfig, from: string, to: string, shards: readonly number[]) {
  const source = await connectServer(config, from);
  const target = await connectServer(config, to);
  try {
    await target.query('DROP SCHEMA IF EXISTS bench_plain CASCADE; CREATE SCHEMA bench_plain');
    for (const shard of shards) {
      await target.query(
        `CREATE TABLE bench_plain.items_${shard} (id bigint PRIMARY KEY, user_id bigint NOT NULL, note text, created_at timestamptz NOT NULL)`,
      );
    }
    const started = performance.now();
    let rows = 0;
    for (const shard of shards) {
      const reader = source.query(
        copyTo(`COPY ${qualified(shardSchema(config, shard), 'items')} TO STDOUT (FORMAT binary)`),
      );
      const writer = target.query(copyFrom(`COPY bench_plain.items_${shard} FROM STDIN (FORMAT binary)`));
      await pipeline(reader, writer);
      rows += Number((writer as unknown as { rowCount: number }).rowCount ?? 0);
    }
    const ms = performance.now() - started;
    await target.query('DROP SCHEMA bench_plain CASCADE');
    return Math.round((rows * 1000) / ms);
  } finally {
    await Promise.all([source.end(), target.end()]);
  }
}

async function bigSetPart(
  opts: typeof DEFAULTS & RebalanceBenchOptions,
  machine: { postgres: string },
): Promise<RebalanceBenchResult['bigSet']> {
  const servers = await startEmbeddedServers(2);
  try {
    const logical = opts.setShards * 2;
    const config = clusterConfig(servers, logical);
    await initCluster(config);
    const shards = Array.from({ length: opts.setShards }, (_, i) => i); // the first half is on a
    await fill(config, 'a', shards, Math.floor(opts.setRows / opts.setShards));
    const probe = await connectServer(config, 'a');
    machine.postgres = await postgresVersion(probe);
    await probe.end();
    const plain: number[] = [await plainCopy(config, 'a', 'b', shards)];
    opts.onProgress?.('plain copy', 1, 2);

    const router = await createRouter(config);
    const normal: number[] = [];
    const during = new Map<number, number[]>(shards.map((s) => [s, []]));
    let moving = false;
    let stop = false;
    const writers = shards.map(async (shard) => {
      for (let i = 0; !stop; i++) {
        const t = performance.now();
        await router.insert('items', { user_id: i, note: 'live' }, { shard });
        (moving ? (during.get(shard) as number[]) : normal).push(performance.now() - t);
      }
    });
    await new Promise((r) => setTimeout(r, 1000));
    moving = true;
    const results = await moveSets(
      config,
      shards.map((shard) => ({ shard, to: 'b' })),
      {
        // Shards this big are what `snapshots` is for: checksums on pinned snapshots, counts in the pause.
        verify: opts.verify,
        onSetProgress: (p) => {
          if (p.phase === 'copying') opts.onProgress?.('set copy', p.done, p.total);
        },
      },
    );
    await new Promise((r) => setTimeout(r, 300));
    stop = true;
    await Promise.all(writers);
    await router.close();
    moving = false;
    plain.push(await plainCopy(config, 'b', 'a', shards));
    opts.onProgress?.('plain copy', 2, 2);

    const first = results[0] as MoveResult;
    const setRate = first.rowsPerSecond ?? 0;
    const meanPlain = plain.reduce((n, v) => n + v, 0) / plain.length;
    const longest = Object.fromEntries(
      [...during].map(([shard, l]) => [String(shard), round(Math.max(0, ...l), 1)]),
    );
    const longestInsertMs = Math.max(0, ...Object.values(longest));
    const sortedNormal = [...normal].sort((x, y) => x - y);
    return {
      rows: Number(results.reduce((n, r) => n + r.rows, 0n)),
      shards: opts.setShards,
      plainCopy: { rowsPerSecond: plain },
      setCopy: { rowsPerSecond: setRate, ms: Math.round(first.copyMs ?? 0) },
      ratio: round(setRate / meanPlain, 2),
      longestInsertMsPerShard: longest,
      longestInsertMs,
      normalInsertP50Ms: round(sortedNormal[Math.floor(sortedNormal.length / 2)] ?? 0, 2),
      cutoverPauseMs: round(Math.max(0, ...results.map((r) => r.pauseMs ?? 0)), 1),
      verify: opts.verify,
      longestPauseSteps:
        [...results].sort((x, y) => (y.pauseMs ?? 0) - (x.pauseMs ?? 0))[0]?.pauseSteps ?? {},
      meetsCopyTarget: setRate >= TARGET_COPY_RATIO * meanPlain,
      meetsPauseTarget: longestInsertMs <= TARGET_PAUSE_MS,
    };
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

async function postgresVersion(client: pg.Client): Promise<string> {
  const { rows } = await client.query('SHOW server_version');
  return (rows[0] as { server_version: string }).server_version;
}

export async function runRebalanceBench(options: RebalanceBenchOptions = {}): Promise<RebalanceBenchResult> {
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
  const opts = { ...DEFAULTS, ...given } as typeof DEFAULTS & RebalanceBenchOptions;
  const rebalance = await rebalancePart(opts);
  const machine = { cpus: cpus().length, node: process.version, postgres: '' };
  const bigSet = await bigSetPart(opts, machine);
  return { rebalance, bigSet, machine };
}

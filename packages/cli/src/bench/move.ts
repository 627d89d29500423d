import { cpus } from 'node:os';
import { startEmbeddedServers } from '@shardflake/embedded';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { type ClusterConfig, shardSchema, validateConfig } from 'shardflake/internal/config/config.js';
import { type MoveResult, moveShard, VERIFY_MODES, type VerifyMode } from 'shardflake/internal/move/move.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { connectServer } from 'shardflake/internal/topology/connections.js';
import type { ReportSection } from './report.js';

/**
 * `bench move`: what an online shard move costs, measured in one run on two embedded servers.
 *
 * - Copy speed: a shard holding `rows` rows is moved while a writer inserts into it through the router; rows per
 *   second of the initial copy (the subscription's binary COPY into tables with their primary keys; secondary
 *   indexes are built after it and reported apart, with the catch-up).
 * - Write pause: the same writer's per-insert latency (one insert at a time, the next as soon as the last is
 *   acknowledged) before the move — its normal latency — and during the move; the longest insert during the move
 *   is the pause the application sees at cutover (lock wait, verification, fence, router retry after SF001).
 *
 * Targets: copy ≥ 100,000 rows/s, longest pause ≤ 500 ms.
 */
export interface MoveBenchOptions {
  rows?: number;
  /** How long the writer runs before the move to measure its normal latency (ms). */
  baselineMs?: number;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface LatencySummary {
  inserts: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export interface MoveBenchRun {
  verify: VerifyMode;
  copy: {
    rows: string;
    ms: number;
    rowsPerSecond: number;
    targetRowsPerSecond: number;
    meetsTarget: boolean;
  };
  pause: {
    /** Longest single insert while the move ran, as the router-based writer saw it. */
    longestWriteMs: number;
    /** Time the move held the source's write lock until the catalog switched. */
    moveReportedMs: number;
    steps: Record<string, number>;
    targetMs: number;
    meetsTarget: boolean;
  };
  writer: { normal: LatencySummary; duringMove: LatencySummary; ratioLongestToNormalP50: number };
  move: MoveResult;
}

export interface MoveBenchResult {
  rows: number;
  /** One move per verification mode, each of its own shard, in this order: in-pause, snapshots. */
  runs: MoveBenchRun[];
  machine: { cpus: number; node: string };
}

const DEFAULTS = { rows: 200_000, baselineMs: 2000 };
export const TARGET_ROWS_PER_SECOND = 100_000;
export const TARGET_PAUSE_MS = 500;

function summarize(latencies: readonly number[]): LatencySummary {
  const sorted = [...latencies].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  const round = (n: number) => Math.round(n * 100) / 100;
  return {
    inserts: sorted.length,
    p50Ms: round(at(0.5)),
    p99Ms: round(at(0.99)),
    maxMs: round(sorted.at(-1) ?? 0),
  };
}

async function measureMove(
  config: ClusterConfig,
  shard: number,
  verify: VerifyMode,
  opts: typeof DEFAULTS & MoveBenchOptions,
): Promise<MoveBenchRun> {
  const router = await createRouter(config);
  const normal: number[] = [];
  const during: number[] = [];
  let sink = normal;
  let stop = false;
  const writer = (async () => {
    for (let i = 0; !stop; i++) {
      const t = performance.now();
      await router.insert('photos', { user_id: i % 1000, caption: 'live' }, { shard });
      sink.push(performance.now() - t);
    }
  })();
  await new Promise((r) => setTimeout(r, opts.baselineMs));
  sink = during;
  const move = await moveShard(config, shard, 'b', {
    verify,
    onProgress: (p) => {
      if (p.totalRows > 0n) opts.onProgress?.(`copy (${verify})`, Number(p.copiedRows), Number(p.totalRows));
    },
  });
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await writer;
  await router.close();

  const normalSummary = summarize(normal);
  const duringSummary = summarize(during);
  const rowsPerSecond = move.rowsPerSecond ?? 0;
  return {
    verify,
    copy: {
      rows: move.rows.toString(),
      ms: Math.round(move.copyMs ?? 0),
      rowsPerSecond,
      targetRowsPerSecond: TARGET_ROWS_PER_SECOND,
      meetsTarget: rowsPerSecond >= TARGET_ROWS_PER_SECOND,
    },
    pause: {
      longestWriteMs: duringSummary.maxMs,
      moveReportedMs: Math.round((move.pauseMs ?? 0) * 10) / 10,
      steps: move.pauseSteps,
      targetMs: TARGET_PAUSE_MS,
      meetsTarget: duringSummary.maxMs <= TARGET_PAUSE_MS,
    },
    writer: {
      normal: normalSummary,
      duringMove: duringSummary,
      ratioLongestToNormalP50:
        Math.round((duringSummary.maxMs / Math.max(normalSummary.p50Ms, 0.01)) * 10) / 10,
    },
    move,
  };
}

export async function runMoveBench(options: MoveBenchOptions = {}): Promise<MoveBenchResult> {
  const opts = { ...DEFAULTS, ...options };
  const servers = await startEmbeddedServers(2);
  try {
    const config: ClusterConfig = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: 4,
        epoch: '2024-01-01T00:00:00Z',
        tables: {
          photos: [
            'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text, created_at timestamptz NOT NULL DEFAULT now())',
            'CREATE INDEX photos_user ON photos (user_id, id DESC)',
          ],
        },
      },
      'bench move',
    );
    await initCluster(config);
    const source = await connectServer(config, 'a');
    const runs: MoveBenchRun[] = [];
    // Shards 0 and 1 live on server a; each mode moves its own shard to b.
    for (const [shard, verify] of VERIFY_MODES.entries()) {
      const schema = shardSchema(config, shard);
      await source.query(
        `INSERT INTO "${schema}".photos (user_id, caption) SELECT g % 1000, 'photo ' || g FROM generate_series(1, ${opts.rows}) g`,
      );
      await source.query(`VACUUM ANALYZE "${schema}".photos`);
      runs.push(await measureMove(config, shard, verify, opts));
    }
    await source.end();
    return { rows: opts.rows, runs, machine: { cpus: cpus().length, node: process.version } };
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

/**
 * The result as a report section: the copy speed of each mode against its target, and the writer's latency
 * (normal p50/p99 before the move, p50/p99 and the longest insert during it) against the pause target, on a log
 * axis because the longest insert is tens to hundreds of times the normal p50.
 */
export function moveSection(result: MoveBenchResult): ReportSection {
  const pauses = result.runs.map(
    (run) =>
      `${run.verify}: longest insert ${run.pause.longestWriteMs} ms = ${run.writer.ratioLongestToNormalP50}× the normal p50, cutover pause ${run.pause.moveReportedMs} ms as the move measured it`,
  );
  return {
    title: 'Online shard move (bench move)',
    description: `A shard of ${result.rows.toLocaleString('en-US')} rows moved between two embedded servers once per verification mode while one router-based writer inserted into it one row at a time. ${pauses.join('; ')}.`,
    result,
    bars: [
      {
        title: `initial copy (dashed: target ≥ ${TARGET_ROWS_PER_SECOND.toLocaleString('en-US')} rows/s)`,
        unit: 'rows/s',
        target: TARGET_ROWS_PER_SECOND,
        values: result.runs.map((run) => ({ label: run.verify, value: run.copy.rowsPerSecond })),
      },
      {
        title: `the writer's insert latency: normal (before the move) and during the move (dashed: pause target ≤ ${TARGET_PAUSE_MS} ms)`,
        unit: 'ms (log scale)',
        target: TARGET_PAUSE_MS,
        log: true,
        values: result.runs.flatMap((run) => [
          { label: `${run.verify}: normal p50`, value: run.writer.normal.p50Ms },
          { label: `${run.verify}: normal p99`, value: run.writer.normal.p99Ms },
          { label: `${run.verify}: move p50`, value: run.writer.duringMove.p50Ms },
          { label: `${run.verify}: move p99`, value: run.writer.duringMove.p99Ms },
          { label: `${run.verify}: move, longest`, value: run.pause.longestWriteMs },
        ]),
      },
    ],
  };
}

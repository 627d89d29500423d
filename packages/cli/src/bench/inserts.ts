import { cpus, loadavg, totalmem } from 'node:os';
import { type EmbeddedServer, startEmbeddedServer } from '@shardflake/embedded';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { mariadbTarget } from './inserts-mariadb.js';
import { postgresTarget } from './inserts-postgres.js';
import { COUNTER_NAMES, type Counters, type InsertTarget } from './inserts-target.js';
import { ID_TYPE_NAMES, type IdType, type IdTypeName, idTypes, PAPER_TYPES } from './inserts-types.js';
import { bootstrapSlope, downsample, linearRegression, percentile, seededRandom, shuffle } from './stats.js';

/**
 * `bench inserts`: the LSID paper's experiment (seed 002), extended. Per id type, N single-row autocommit
 * INSERTs into its own primary-key-indexed table, every latency recorded, a least-squares line through
 * (insert count, latency), p50/p99, rows/s, and what the engine wrote (WAL, full-page images) and read.
 *
 * Fairness: all types run on the same server with the same settings, over one connection, interleaved in
 * batches whose type order is shuffled every round, so drift (a checkpoint, a neighbour's test run) hits every
 * type alike. Keys of app-side types are made before the clock starts.
 */

/** Seed 002's table 1: slope in ns per insert, intercept in ns; 100,000 inserts each. */
export const PAPER_RESULTS = {
  UUID: { slope: 0.13634740839764645, intercept: 3339880.9344822564, ours: 'uuidv4' },
  ULID: { slope: 0.185529453792534, intercept: 3348060.9900751, ours: 'ulid-text' },
  LSID: { slope: 0.0945419569594488, intercept: 3273360.7194230063, ours: 'lsid-text' },
} as const;

export const INSERT_MODES = ['default', 'small-cache', 'paper'] as const;
export type InsertMode = (typeof INSERT_MODES)[number];

/**
 * Server settings per mode (embedded server only). `small-cache` makes the indexes outgrow the cache within
 * minutes (BENCH-NOTES): a 16 MB buffer pool, frequent checkpoints so full-page images keep coming, and no
 * commit fsync so the latency floor is the round trip, not the disk. `paper` keeps the defaults, as the paper did.
 */
export const MODE_SETTINGS: Record<InsertMode, Record<string, string>> = {
  default: {},
  paper: {},
  'small-cache': {
    shared_buffers: '16MB',
    checkpoint_timeout: '30s',
    max_wal_size: '64MB',
    min_wal_size: '32MB',
    full_page_writes: 'on',
    synchronous_commit: 'off',
  },
};

export interface InsertBenchOptions {
  /** Timed single-row inserts per type (default 100,000). */
  rows?: number;
  /** Id types to compare (default: all available; `paper`: uuidv4, ulid-text, lsid-text). */
  types?: readonly IdTypeName[];
  /** Any PostgreSQL server instead of the embedded one (its settings are left alone). */
  url?: string;
  /** Also run on MariaDB/MySQL (InnoDB) at this URL. */
  mysql?: string;
  mode?: InsertMode;
  /** Rows bulk-loaded per type before timing starts (default 0; `small-cache`: 500,000). */
  preload?: number;
  /** Rows per interleaved batch (default rows / 20). */
  batch?: number;
  /** Seed for the type order and the bootstrap (default 1). */
  seed?: number;
  /** Points per type kept for charts (default 500). */
  chartPoints?: number;
  onProgress?: (phase: string, done: number, total: number) => void;
  /** Abort to stop early (Ctrl-C); the result then covers what was measured and says `interrupted`. */
  signal?: AbortSignal;
}

export interface TypeResult {
  type: string;
  description: string;
  keyBytes: number;
  rows: number;
  /** Least squares over (insert number within the timed phase, latency): ns per insert, like the paper. */
  slopeNsPerRow: number;
  /** Bootstrap (moving blocks) 95% interval of the slope. */
  slopeCi: { low: number; high: number; level: number };
  interceptNs: number;
  p50Us: number;
  p99Us: number;
  meanUs: number;
  rowsPerSecond: number;
  indexBytes: number;
  tableBytes: number;
  leafDensity?: number;
  /** Counter deltas over the timed inserts, per insert. */
  perRow: {
    logBytes?: number;
    fullPageImages?: number;
    blocksRead?: number;
    blocksHit?: number;
    pageSplits?: number;
  };
  /** [insert number, latency µs], downsampled for charts. */
  points: [number, number][];
  /** [middle insert number, median latency µs] of 50 consecutive slices: the drift the line summarises. */
  medians: [number, number][];
}

export interface EngineResult {
  engine: 'postgres' | 'mariadb';
  description: string;
  cacheBytes: number;
  types: TypeResult[];
  /** What this run's size can and cannot show, in sentences. */
  notes: string[];
}

export interface InsertBenchResult {
  mode: InsertMode;
  rows: number;
  preload: number;
  batch: number;
  seed: number;
  startedAt: string;
  durationSeconds: number;
  machine: { cpus: number; memoryGiB: number; node: string; loadAverage: number[] };
  engines: EngineResult[];
  paper: typeof PAPER_RESULTS;
  interrupted: boolean;
}

const DEFAULTS = { rows: 100_000, seed: 1, chartPoints: 500, warmup: 20 } as const;

function positiveInteger(value: number, what: string, min = 1): number {
  if (!Number.isInteger(value) || value < min) {
    throw new ShardflakeError('INVALID_ARGUMENT', `${what} must be an integer ≥ ${min}, got ${value}`);
  }
  return value;
}

export async function runInsertBench(options: InsertBenchOptions = {}): Promise<InsertBenchResult> {
  const mode = options.mode ?? 'default';
  const rows = positiveInteger(options.rows ?? DEFAULTS.rows, '--rows', 3);
  const preload = positiveInteger(options.preload ?? (mode === 'small-cache' ? 500_000 : 0), '--preload', 0);
  const batch = positiveInteger(options.batch ?? Math.max(1, Math.ceil(rows / 20)), '--batch');
  const seed = options.seed ?? DEFAULTS.seed;
  const known = idTypes();
  const wanted = options.types ?? (mode === 'paper' ? PAPER_TYPES : ID_TYPE_NAMES);
  const types = wanted.flatMap((name) => known.get(name) ?? []);
  if (types.length === 0) throw new ShardflakeError('INVALID_ARGUMENT', 'no id type to run');
  const startedAt = new Date();
  const started = performance.now();
  const progress = options.onProgress ?? (() => {});

  const engines: EngineResult[] = [];
  let interrupted = false;
  let server: EmbeddedServer | undefined;
  try {
    let url = options.url;
    if (!url) {
      progress('starting PostgreSQL', 0, 1);
      server = await startEmbeddedServer('bench', { settings: MODE_SETTINGS[mode] });
      url = server.url;
    }
    const targets: (() => Promise<InsertTarget>)[] = [() => postgresTarget(url as string)];
    if (options.mysql) {
      const mysqlUrl = options.mysql;
      targets.push(() => mariadbTarget(mysqlUrl, { smallCache: mode === 'small-cache' }));
    }
    for (const open of targets) {
      if (options.signal?.aborted) break;
      const target = await open();
      try {
        const usable = target.engine === 'mariadb' ? types.filter((t) => t.mysqlColumn) : types;
        const measured = await measureEngine(target, usable, {
          rows,
          preload,
          batch,
          seed,
          progress,
          signal: options.signal,
        });
        interrupted ||= measured.interrupted;
        engines.push({
          engine: target.engine,
          description: target.description,
          cacheBytes: target.cacheBytes,
          types: measured.results.map((m) => summarize(m, seed, options.chartPoints ?? DEFAULTS.chartPoints)),
          notes: [],
        });
        const engine = engines[engines.length - 1] as EngineResult;
        engine.notes = capabilityNotes(engine, mode, rows, preload);
      } finally {
        await target.close();
      }
    }
  } finally {
    await server?.stop();
  }
  return {
    mode,
    rows,
    preload,
    batch,
    seed,
    startedAt: startedAt.toISOString(),
    durationSeconds: Math.round((performance.now() - started) / 100) / 10,
    machine: {
      cpus: cpus().length,
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      node: process.version,
      loadAverage: loadavg().map((l) => Math.round(l * 100) / 100),
    },
    engines,
    paper: PAPER_RESULTS,
    interrupted: interrupted || (options.signal?.aborted ?? false),
  };
}

interface Measured {
  type: IdType;
  latenciesNs: Float64Array;
  done: number;
  elapsedNs: number;
  counters: Counters;
  sizes: Awaited<ReturnType<InsertTarget['sizes']>>;
}

interface LoopOptions {
  rows: number;
  preload: number;
  batch: number;
  seed: number;
  progress: (phase: string, done: number, total: number) => void;
  signal: AbortSignal | undefined;
}

async function measureEngine(
  target: InsertTarget,
  types: IdType[],
  o: LoopOptions,
): Promise<{ results: Measured[]; interrupted: boolean }> {
  const label = target.engine === 'postgres' ? 'PostgreSQL' : 'MariaDB';
  for (const [i, type] of types.entries()) {
    await target.prepare(type);
    if (o.preload > 0) {
      o.progress(`${label} preload`, i, types.length);
      await target.preload(type, o.preload);
    }
    // A few untimed inserts so the first timed one does not pay for planning the prepared statement.
    for (let w = 0; w < DEFAULTS.warmup; w++) await target.insert(type, -o.preload - 1 - w, target.key(type));
  }
  await target.checkpoint();

  const random = seededRandom(o.seed);
  const state = types.map((type) => ({
    type,
    latenciesNs: new Float64Array(o.rows),
    done: 0,
    elapsedNs: 0,
    counters: {} as Counters,
  }));
  const total = o.rows * types.length;
  let doneAll = 0;
  let interrupted = false;
  rounds: while (doneAll < total) {
    for (const s of shuffle(state, random)) {
      const end = Math.min(o.rows, s.done + o.batch);
      if (s.done >= end) continue;
      const before = await target.counters();
      const batchStart = process.hrtime.bigint();
      for (let n = s.done; n < end; n++) {
        if (o.signal?.aborted) {
          interrupted = true;
          await charge(target, s, before, batchStart);
          break rounds;
        }
        const key = target.key(s.type);
        const t0 = process.hrtime.bigint();
        await target.insert(s.type, n, key);
        s.latenciesNs[n] = Number(process.hrtime.bigint() - t0);
        s.done = n + 1;
        doneAll++;
        if ((doneAll & 255) === 0) o.progress(label, doneAll, total);
      }
      await charge(target, s, before, batchStart);
    }
  }
  o.progress(label, doneAll, total);
  const results: Measured[] = [];
  for (const s of state) {
    if (s.done < 3) continue;
    results.push({ ...s, latenciesNs: s.latenciesNs.subarray(0, s.done), sizes: await target.sizes(s.type) });
  }
  return { results, interrupted };
}

/** Adds a batch's counter deltas and wall time (counter reads excluded) to its type. */
async function charge(
  target: InsertTarget,
  s: { counters: Counters; elapsedNs: number },
  before: Counters,
  batchStart: bigint,
): Promise<void> {
  s.elapsedNs += Number(process.hrtime.bigint() - batchStart);
  const after = await target.counters();
  for (const name of COUNTER_NAMES) {
    const a = after[name];
    const b = before[name];
    if (a !== undefined && b !== undefined) s.counters[name] = (s.counters[name] ?? 0) + (a - b);
  }
}

const round = (value: number, digits: number) => Number(value.toFixed(digits));

function summarize(m: Measured, seed: number, chartPoints: number): TypeResult {
  const n = m.latenciesNs.length;
  const xs = Float64Array.from({ length: n }, (_, i) => i);
  const line = linearRegression(xs, m.latenciesNs);
  const ci = bootstrapSlope(xs, m.latenciesNs, { random: seededRandom(seed) });
  let sum = 0;
  for (const v of m.latenciesNs) sum += v;
  const perRow: TypeResult['perRow'] = {};
  for (const name of COUNTER_NAMES) {
    const value = m.counters[name];
    if (value !== undefined && Number.isFinite(value)) perRow[name] = round(value / n, 4);
  }
  const points = downsample(
    Array.from(m.latenciesNs, (v, i) => [i, round(v / 1000, 1)] as [number, number]),
    chartPoints,
  );
  const slices = Math.min(50, n);
  const medians: [number, number][] = [];
  for (let k = 0; k < slices; k++) {
    const from = Math.floor((k * n) / slices);
    const to = Math.floor(((k + 1) * n) / slices);
    medians.push([
      Math.floor((from + to - 1) / 2),
      round(percentile(m.latenciesNs.subarray(from, to), 50) / 1000, 1),
    ]);
  }
  return {
    type: m.type.name,
    description: m.type.description,
    keyBytes: m.type.keyBytes,
    rows: n,
    slopeNsPerRow: round(line.slope, 5),
    slopeCi: { low: round(ci.low, 5), high: round(ci.high, 5), level: ci.level },
    interceptNs: Math.round(line.intercept),
    p50Us: round(percentile(m.latenciesNs, 50) / 1000, 1),
    p99Us: round(percentile(m.latenciesNs, 99) / 1000, 1),
    meanUs: round(sum / n / 1000, 1),
    rowsPerSecond: Math.round(n / (m.elapsedNs / 1e9)),
    indexBytes: m.sizes.indexBytes,
    tableBytes: m.sizes.tableBytes,
    ...(m.sizes.leafDensity === undefined ? {} : { leafDensity: round(m.sizes.leafDensity, 1) }),
    perRow,
    points,
    medians,
  };
}

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;

/** Plain sentences on what this run's size can and cannot show, printed with every result. */
export function capabilityNotes(
  engine: EngineResult,
  mode: InsertMode,
  rows: number,
  preload: number,
): string[] {
  const notes: string[] = [];
  if (engine.types.length === 0) return notes;
  const cacheName = engine.engine === 'postgres' ? 'shared_buffers' : 'the InnoDB buffer pool';
  const largest = engine.types.reduce((a, b) => (b.indexBytes > a.indexBytes ? b : a));
  const totalIndex = engine.types.reduce((sum, t) => sum + t.indexBytes, 0);
  if (largest.indexBytes <= engine.cacheBytes) {
    notes.push(
      `Every primary-key index fits in ${cacheName} (largest ${largest.type}: ${mb(largest.indexBytes)} ≤ ${mb(engine.cacheBytes)}): random keys cannot show their cache-miss cost at this size; differences are WAL volume, index size and CPU.`,
    );
  } else {
    notes.push(
      `The largest index (${largest.type}, ${mb(largest.indexBytes)}) is ${(largest.indexBytes / engine.cacheBytes).toFixed(1)}× ${cacheName} (${mb(engine.cacheBytes)}); all indexes together ${mb(totalIndex)}: random keys must evict and re-read pages, visible in ${engine.engine === 'postgres' ? 'blocks read and full-page images' : 'buffer-pool misses and page splits'} per insert.`,
    );
  }
  const carries =
    engine.engine === 'postgres' ? 'WAL bytes and full-page images' : 'buffer-pool misses and redo bytes';
  notes.push(
    `Pages evicted from ${cacheName} still sit in the OS page cache (${Math.round(totalmem() / 2 ** 30)} GiB RAM here), so a "read" costs a memory copy, not a disk seek: this run cannot show the disk-bound latency of a database far larger than RAM; ${carries} per insert are the figures that carry over.`,
  );
  const spans = engine.types.map((t) => Math.abs(t.slopeNsPerRow * t.rows) / Math.max(1, t.interceptNs));
  const maxSpan = Math.max(...spans);
  notes.push(
    `Over ${rows.toLocaleString('en-US')} timed inserts per type${preload ? ` (after ${preload.toLocaleString('en-US')} preloaded rows)` : ''} the fitted lines move latency by at most ${(maxSpan * 100).toFixed(1)}% of their intercept; a slope whose interval contains 0 shows no trend at this size.`,
  );
  if (mode === 'small-cache' && engine.engine === 'postgres') {
    notes.push(
      "synchronous_commit=off removes the commit fsync, so intercepts are a loopback round trip, not the paper's ≈3.3 ms (which includes a disk flush); compare slopes and per-insert WAL, not intercepts.",
    );
  }
  return notes;
}

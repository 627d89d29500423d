import { ShardflakeError } from 'shardflake/internal/errors/errors.js';

/**
 * The statistics the insert benchmark reports: an ordinary least-squares line through (insert count, latency),
 * percentiles, and a bootstrap confidence interval for the slope. Inputs are plain number arrays (latencies in
 * nanoseconds fit a double exactly up to ~104 days).
 */

export interface Line {
  /** Change of y per unit of x (for latency vs insert count: ns per row). */
  slope: number;
  /** y at x = 0. */
  intercept: number;
}

/** Least-squares fit of y = intercept + slope·x, computed around the means so large x and y keep their precision. */
export function linearRegression(xs: ArrayLike<number>, ys: ArrayLike<number>): Line {
  const n = xs.length;
  if (n !== ys.length) throw new ShardflakeError('INVALID_ARGUMENT', 'x and y must have the same length');
  if (n < 2) throw new ShardflakeError('INVALID_ARGUMENT', 'a line needs at least 2 points');
  let meanX = 0;
  let meanY = 0;
  for (let i = 0; i < n; i++) {
    meanX += (xs[i] as number) / n;
    meanY += (ys[i] as number) / n;
  }
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < n; i++) {
    const dx = (xs[i] as number) - meanX;
    sxy += dx * ((ys[i] as number) - meanY);
    sxx += dx * dx;
  }
  if (sxx === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'all x values are equal: the slope is undefined');
  const slope = sxy / sxx;
  return { slope, intercept: meanY - slope * meanX };
}

/** The p-th percentile (0–100) by the nearest-rank method: a value that occurs in the data. */
export function percentile(values: ArrayLike<number>, p: number): number {
  if (values.length === 0) throw new ShardflakeError('INVALID_ARGUMENT', 'no values');
  if (!(p >= 0 && p <= 100))
    throw new ShardflakeError('INVALID_ARGUMENT', `percentile ${p} is not in 0..100`);
  const sorted = Float64Array.from(values).sort();
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1] as number;
}

export interface SlopeInterval {
  /** Lower and upper bound of the central `level` interval of the bootstrap slopes. */
  low: number;
  high: number;
  level: number;
  resamples: number;
  blockLength: number;
}

export interface BootstrapOptions {
  resamples?: number;
  /** Confidence level, default 0.95. */
  level?: number;
  /**
   * Rows per resampled block (default n/50). Latencies are not independent: a checkpoint or a busy neighbour
   * slows thousands of consecutive inserts, so resampling single rows would give an interval that is far too
   * narrow. Moving blocks keep that correlation inside each block.
   */
  blockLength?: number;
  /** Uniform [0, 1) source; inject a seeded one in tests. */
  random?: () => number;
}

/** A small seeded generator (mulberry32), so bootstrap intervals are reproducible run to run. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Fisher–Yates with the run's seeded random source. */
export function shuffle<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

/** Moving-block bootstrap interval for the least-squares slope. */
export function bootstrapSlope(
  xs: ArrayLike<number>,
  ys: ArrayLike<number>,
  options: BootstrapOptions = {},
): SlopeInterval {
  const n = xs.length;
  const resamples = options.resamples ?? 400;
  const level = options.level ?? 0.95;
  const blockLength = Math.max(1, Math.min(n, options.blockLength ?? Math.ceil(n / 50)));
  const random = options.random ?? seededRandom(0x5eed);
  if (n < 3) throw new ShardflakeError('INVALID_ARGUMENT', 'a slope interval needs at least 3 points');
  const slopes = new Float64Array(resamples);
  const starts = n - blockLength + 1;
  for (let r = 0; r < resamples; r++) {
    // Sums for the fit, accumulated around a fixed centre (the data's middle) to keep precision.
    const cx = xs[n >> 1] as number;
    const cy = ys[n >> 1] as number;
    let count = 0;
    let sx = 0;
    let sy = 0;
    let sxx = 0;
    let sxy = 0;
    while (count < n) {
      const start = Math.floor(random() * starts);
      const end = Math.min(start + blockLength, start + (n - count));
      for (let i = start; i < end; i++) {
        const x = (xs[i] as number) - cx;
        const y = (ys[i] as number) - cy;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
      }
      count += end - start;
    }
    const denominator = count * sxx - sx * sx;
    slopes[r] = denominator === 0 ? 0 : (count * sxy - sx * sy) / denominator;
  }
  const tail = ((1 - level) / 2) * 100;
  return {
    low: percentile(slopes, tail),
    high: percentile(slopes, 100 - tail),
    level,
    resamples,
    blockLength,
  };
}

/** Every k-th point (always keeping the last), so a chart of 100,000 latencies stays a few hundred marks. */
export function downsample<T>(points: readonly T[], max: number): T[] {
  if (points.length <= max) return [...points];
  const step = points.length / max;
  const picked: T[] = [];
  for (let i = 0; i < max; i++) picked.push(points[Math.floor(i * step)] as T);
  picked[picked.length - 1] = points[points.length - 1] as T;
  return picked;
}

export const median = (values: ArrayLike<number>): number => percentile(values, 50);

/** Runs `count` tasks, `concurrency` at a time (each worker takes the next task as it finishes one); tasks per second. */
export async function tasksPerSecond(
  count: number,
  concurrency: number,
  task: (i: number) => Promise<unknown>,
): Promise<number> {
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    for (let i = next++; i < count; i = next++) await task(i);
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return count / ((performance.now() - started) / 1000);
}

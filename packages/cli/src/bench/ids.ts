import { randomUUID } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import { capPerSecond, createGenerator } from 'shardflake/internal/ids/generator.js';
import { layouts } from 'shardflake/internal/ids/layout.js';
import { createLsidGenerator } from 'shardflake/internal/ids/lsid-generator.js';

/**
 * D1: id generation throughput, ours and the peers', measured side by side in one run. Each candidate runs for
 * `durationMs` of real time per round, over `rounds` interleaved rounds; the best round counts (on a shared
 * machine the best round is the one least disturbed by other processes). Then a checking pass keeps every id of
 * a fresh generator (as many as its best round made, at most 4M, made back to back) and counts duplicates and
 * order violations (an id not greater than the one before). Figures are reported as ratios against each layout's cap
 * (sequence values per tick / tick length) and against crypto.randomUUID() from the same run.
 */
export interface IdsBenchOptions {
  /** Real time per candidate and round (default 1000 ms). */
  durationMs?: number;
  /** Interleaved rounds; the best counts (default 3). */
  rounds?: number;
  /** Only candidates whose name contains one of these strings. */
  only?: string[];
  /** Called before each measurement (for a progress bar). */
  onProgress?: (done: number, total: number, name: string) => void;
}

export const CANDIDATE_GROUPS = ['shardflake', 'peer', 'baseline'] as const;
export type CandidateGroup = (typeof CANDIDATE_GROUPS)[number];

export interface IdsBenchEntry {
  name: string;
  group: CandidateGroup;
  /** What one id is: a 64-bit bigint or a string. */
  type: 'bigint' | 'string';
  idsPerSecond: number;
  /** Ids produced in the best timed round. */
  count: number;
  /** Ids of the checking pass: a fresh generator's first ids (as many as the best round made, at most 4M). */
  checked: number;
  /** Ids of the checking pass that equal an earlier one. */
  duplicates: number;
  /** Ids of the checking pass not greater than the one before (time-sortable formats should have 0). */
  orderViolations: number;
  /** The layout's maximum rate for one generator, if it has one. */
  cap: number | null;
  ratioToCap: number | null;
  ratioToRandomUUID: number | null;
  note?: string;
}

export interface IdsBenchTarget {
  what: string;
  target: number;
  actual: number | null;
  met: boolean;
}

export interface IdsBenchResult {
  benchmark: 'ids';
  startedAt: string;
  node: string;
  cpus: number;
  /** 1-minute load average at start and end: a loaded machine lowers every figure. */
  loadAverage: { start: number; end: number };
  durationMs: number;
  rounds: number;
  entries: IdsBenchEntry[];
  targets: IdsBenchTarget[];
}

interface Candidate {
  name: string;
  group: CandidateGroup;
  type: 'bigint' | 'string';
  cap?: number;
  note?: string;
  /** Builds a fresh generator for each round. */
  make: () => () => bigint | string;
}

async function candidates(): Promise<Candidate[]> {
  // The peers are loaded here, when the benchmark runs, not when the library is imported.
  const [{ ObjectId }, { monotonicFactory, ulid }, { v4: uuidv4, v7: uuidv7 }] = await Promise.all([
    import('bson'),
    import('ulid'),
    import('uuid'),
  ]);
  const list: Candidate[] = [
    {
      name: 'shardflake instagram',
      group: 'shardflake',
      type: 'bigint',
      cap: capPerSecond('instagram'),
      make: () => {
        const g = createGenerator({ layout: 'instagram', shard: 5 });
        return () => g.next();
      },
    },
    {
      name: 'shardflake snowflake',
      group: 'shardflake',
      type: 'bigint',
      cap: capPerSecond('snowflake'),
      make: () => {
        const g = createGenerator({ layout: 'snowflake', worker: 5 });
        return () => g.next();
      },
    },
    {
      name: 'shardflake discord',
      group: 'shardflake',
      type: 'bigint',
      cap: capPerSecond('discord'),
      make: () => {
        const g = createGenerator({ layout: 'discord', worker: 1, process: 0 });
        return () => g.next();
      },
    },
    {
      name: 'shardflake sonyflake',
      group: 'shardflake',
      type: 'bigint',
      cap: capPerSecond('sonyflake'),
      make: () => {
        const g = createGenerator({ layout: 'sonyflake', machine: 1 });
        return () => g.next();
      },
    },
    {
      name: 'shardflake lsid',
      group: 'shardflake',
      type: 'string',
      make: () => {
        const g = createLsidGenerator();
        return () => g.next();
      },
    },
    { name: 'crypto.randomUUID', group: 'baseline', type: 'string', make: () => () => randomUUID() },
    { name: 'uuid v4', group: 'peer', type: 'string', make: () => () => uuidv4() },
    { name: 'uuid v7', group: 'peer', type: 'string', make: () => () => uuidv7() },
    { name: 'ulid', group: 'peer', type: 'string', make: () => () => ulid() },
    {
      name: 'ulid monotonic',
      group: 'peer',
      type: 'string',
      make: () => {
        const next = monotonicFactory();
        return () => next();
      },
    },
    { name: 'bson ObjectId', group: 'peer', type: 'string', make: () => () => new ObjectId().toHexString() },
  ];
  // The peer snowflake libraries are dev dependencies: measured when installed, skipped otherwise.
  try {
    const { Snowflake } = await import('@sapphire/snowflake');
    list.push({
      name: '@sapphire/snowflake',
      group: 'peer',
      type: 'bigint',
      cap: capPerSecond('discord'),
      note: 'discord layout; its 12-bit increment wraps instead of waiting',
      make: () => {
        const s = new Snowflake(layouts.discord.epoch);
        return () => s.generate({ workerId: 1n, processId: 0n });
      },
    });
  } catch {
    // not installed
  }
  try {
    const { Snowflake } = await import('nodejs-snowflake');
    list.push({
      name: 'nodejs-snowflake',
      group: 'peer',
      type: 'bigint',
      cap: capPerSecond('snowflake'),
      note: 'WebAssembly; 41 ms / 10 instance / 12 sequence',
      make: () => {
        const s = new Snowflake({ custom_epoch: layouts.snowflake.epoch, instance_id: 5 });
        return () => s.getUniqueID() as bigint;
      },
    });
  } catch {
    // not installed
  }
  return list;
}

/** Ids kept for the duplicate check: the first this many of a fresh generator, made back to back. */
const CHECKED_IDS = 4_000_000;

interface Round {
  idsPerSecond: number;
  count: number;
  checked: number;
  duplicates: number;
  orderViolations: number;
}

/**
 * The timed pass. Ids go into a small ring (so nothing is optimised away) rather than one huge array: keeping
 * millions of strings alive measures the garbage collector more than the generator, and penalises flat strings
 * (randomUUID) against cheap concatenations (LSID).
 */
function measureRate(
  next: () => bigint | string,
  durationMs: number,
): { idsPerSecond: number; count: number } {
  const ring: (bigint | string)[] = new Array(1024);
  let n = 0;
  const start = performance.now();
  let now = start;
  while (now - start < durationMs) {
    for (let i = 0; i < 1024; i++) ring[i] = next();
    n += 1024;
    now = performance.now();
  }
  return { idsPerSecond: n / ((now - start) / 1000), count: n };
}

/** The checking pass: `count` ids of a fresh generator, back to back, all kept; duplicates and order counted. */
function check(candidate: Candidate, count: number): { duplicates: number; orderViolations: number } {
  const next = candidate.make();
  let orderViolations = 0;
  if (candidate.type === 'bigint') {
    const ids = new BigUint64Array(count);
    for (let i = 0; i < count; i++) ids[i] = next() as bigint;
    for (let i = 1; i < count; i++) if ((ids[i] as bigint) <= (ids[i - 1] as bigint)) orderViolations++;
    ids.sort();
    let duplicates = 0;
    for (let i = 1; i < count; i++) if (ids[i] === ids[i - 1]) duplicates++;
    return { duplicates, orderViolations };
  }
  const ids: string[] = new Array(count);
  for (let i = 0; i < count; i++) ids[i] = next() as string;
  for (let i = 1; i < count; i++) if ((ids[i] as string) <= (ids[i - 1] as string)) orderViolations++;
  return { duplicates: count - new Set(ids).size, orderViolations };
}

export async function runIdsBench(options: IdsBenchOptions = {}): Promise<IdsBenchResult> {
  const durationMs = options.durationMs ?? 1000;
  const rounds = options.rounds ?? 3;
  const all = await candidates();
  const chosen = options.only?.length
    ? all.filter((c) => options.only?.some((o) => c.name.includes(o)))
    : all;
  const startedAt = new Date().toISOString();
  const loadStart = loadavg()[0] ?? 0;
  const best = new Map<string, Round>();
  let done = 0;
  const total = chosen.length * (rounds + 1);
  for (let round = 0; round < rounds; round++) {
    for (const candidate of chosen) {
      options.onProgress?.(done++, total, candidate.name);
      const next = candidate.make();
      for (let i = 0; i < 2000; i++) next(); // warm up the JIT
      const rate = measureRate(next, durationMs);
      const previous = best.get(candidate.name);
      if (!previous || rate.idsPerSecond > previous.idsPerSecond) {
        best.set(candidate.name, { ...rate, checked: 0, duplicates: 0, orderViolations: 0 });
      }
    }
  }
  for (const candidate of chosen) {
    options.onProgress?.(done++, total, `checking ${candidate.name}`);
    const round = best.get(candidate.name) as Round;
    round.checked = Math.min(round.count, CHECKED_IDS);
    Object.assign(round, check(candidate, round.checked));
  }
  options.onProgress?.(done, total, 'done');
  const uuidRate = best.get('crypto.randomUUID')?.idsPerSecond ?? null;
  const entries: IdsBenchEntry[] = chosen.map((c) => {
    const r = best.get(c.name) as Round;
    return {
      name: c.name,
      group: c.group,
      type: c.type,
      idsPerSecond: Math.round(r.idsPerSecond),
      count: r.count,
      checked: r.checked,
      duplicates: r.duplicates,
      orderViolations: r.orderViolations,
      cap: c.cap ?? null,
      ratioToCap: c.cap ? round3(r.idsPerSecond / c.cap) : null,
      ratioToRandomUUID: uuidRate ? round3(r.idsPerSecond / uuidRate) : null,
      ...(c.note ? { note: c.note } : {}),
    };
  });
  const entry = (name: string) => entries.find((e) => e.name === name);
  const ours = entries.filter((e) => e.group === 'shardflake');
  const targets: IdsBenchTarget[] = [
    target(
      'instagram generator / its cap (1,024,000 ids/s)',
      0.95,
      entry('shardflake instagram')?.ratioToCap,
    ),
    target('snowflake generator / its cap (4,096,000 ids/s)', 0.9, entry('shardflake snowflake')?.ratioToCap),
    target('LSID text / crypto.randomUUID()', 1.0, entry('shardflake lsid')?.ratioToRandomUUID),
  ];
  if (ours.length > 0) {
    const dup = ours.reduce((sum, e) => sum + e.duplicates + e.orderViolations, 0);
    targets.push({
      what: 'duplicates + order violations in our generators',
      target: 0,
      actual: dup,
      met: dup === 0,
    });
  }
  return {
    benchmark: 'ids',
    startedAt,
    node: process.version,
    cpus: availableParallelism(),
    loadAverage: { start: loadStart, end: loadavg()[0] ?? 0 },
    durationMs,
    rounds,
    entries,
    targets: targets.filter((t) => t.actual !== null),
  };
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

function target(what: string, goal: number, actual: number | null | undefined): IdsBenchTarget {
  return { what, target: goal, actual: actual ?? null, met: actual != null && actual >= goal };
}

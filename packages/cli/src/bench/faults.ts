import { cpus } from 'node:os';
import type { ClusterConfig } from 'shardflake/internal/config/config.js';
import { cleanupCluster } from 'shardflake/internal/move/cleanup.js';
import { type ContendedScenarioOptions, runContendedTransfers } from './faults-contended.js';
import { type DoubleWritable, type Probes, startProbes } from './faults-probe.js';
import { SCENARIOS, type Scenario, type ScenarioContext, type ScenarioName } from './faults-scenarios.js';
import { type Stage, startStage } from './faults-stage.js';
import { tallyAcknowledged } from './faults-tally.js';
import { startWriters, type WriterLog, type Writers } from './faults-writers.js';

/**
 * `bench faults`: shard moves under the faults of an operator's bad day, each scenario on fresh embedded servers
 * with router writers logging every acknowledged insert (faults-writers.ts) and a check of every node for shards
 * writable on two of them every 250 ms (faults-probe.ts). After the fault the writers go on for a moment, then
 * stop; `cluster cleanup` runs as an operator would; then every acknowledged insert is looked up in its shard's
 * home (faults-tally.ts). The scenarios are in faults-scenarios.ts.
 *
 * Per scenario: acknowledged, lost, half-applied, duplicated, diverged, hung, double-writable shards, and the
 * longest gap between two acknowledged calls of one writer. A run with any lost, half-applied, duplicated,
 * diverged, hung or double-writable is a failed run. The scenarios that write across servers (transfers, unique
 * claims, reference copies: faults-cross-scenarios.ts) run writers and a count of their own (faults-cross.ts) in
 * place of the insert writers; the probes and cleanup are the same.
 *
 * Contended transfers (TRANSFER_SCENARIOS below) run a load of their own that checks both sides of every transfer.
 */
export interface FaultsBenchOptions {
  /** Scenarios to run (default: all, in order). */
  scenarios?: readonly (ScenarioName | TransferScenarioName)[];
  onProgress?: (message: string) => void;
  /**
   * Test hook, after cleanup and before the count: lets a test damage the result (delete an acknowledged row, …)
   * to prove the count sees it.
   */
  beforeTally?: (stage: Stage, config: ClusterConfig, log: WriterLog) => Promise<void>;
  /** Options of the contended-transfers scenario (a test runs it short, and damages its ledgers). */
  contended?: ContendedScenarioOptions;
}

export interface ScenarioResult {
  name: ScenarioName | TransferScenarioName;
  title: string;
  acknowledged: number;
  lost: number;
  /** Writes across servers found on some of their servers and not the others. */
  halfApplied: number;
  duplicated: number;
  /** State that disagrees with itself: balances and entries, copies of a reference table, lookups and rows. */
  diverged: number;
  /** Calls still running HUNG_MS after their writers were asked to stop. */
  hung: number;
  /** Shards found writable on two nodes at one check, with the nodes. */
  doubleWritable: DoubleWritable[];
  /** Longest time a shard went without an acknowledged insert while the writers ran (ms), and that shard. */
  longestGapMs: number;
  longestGapShard: number | null;
  /** Inserts that failed (not acknowledged), by error code. */
  failedInserts: Record<string, number>;
  checks: number;
  /** What happened: the move's outcome, pauses, what cleanup did. */
  notes: string[];
  lostExamples: string[];
  seconds: number;
}

export interface FaultsBenchResult {
  scenarios: ScenarioResult[];
  /** True when some scenario lost, half-applied, duplicated, diverged, hung or left a shard writable twice. */
  faultsFound: boolean;
  machine: { cpus: number; node: string };
  startedAt: string;
}

/** Scenarios of writes across servers, each run by its own function (see the top of this file). */
const TRANSFER_SCENARIOS = {
  'contended-transfers': {
    title:
      'transfers with withShards in both directions among a few hot accounts on two servers: deadlocks across servers form all the time and are broken',
    run: async (options: FaultsBenchOptions): Promise<Partial<ScenarioResult>> => {
      const r = await runContendedTransfers(options.contended);
      return {
        acknowledged: r.acknowledged,
        lost: r.lost,
        duplicated: r.duplicated,
        halfApplied: r.halfApplied,
        diverged: r.diverged,
        hung: r.hung,
        longestGapMs: r.longestGapMs,
        failedInserts: r.failed,
        notes: r.notes,
        lostExamples: r.examples,
      };
    },
  },
};
export type TransferScenarioName = keyof typeof TRANSFER_SCENARIOS;

export const SCENARIO_NAMES = [...Object.keys(SCENARIOS), ...Object.keys(TRANSFER_SCENARIOS)] as (
  | ScenarioName
  | TransferScenarioName
)[];

/** Any lost, half-applied, duplicated, diverged or hung call, or double-writable shard, in the results. */
export function faultsFound(scenarios: readonly ScenarioResult[]): boolean {
  return scenarios.some(
    (s) =>
      s.lost > 0 ||
      s.halfApplied > 0 ||
      s.duplicated > 0 ||
      s.diverged > 0 ||
      s.hung > 0 ||
      s.doubleWritable.length > 0,
  );
}

async function runTransferScenario(
  name: TransferScenarioName,
  options: FaultsBenchOptions,
): Promise<ScenarioResult> {
  const started = performance.now();
  const r = await TRANSFER_SCENARIOS[name].run(options);
  return {
    name,
    title: TRANSFER_SCENARIOS[name].title,
    acknowledged: 0,
    lost: 0,
    halfApplied: 0,
    duplicated: 0,
    diverged: 0,
    hung: 0,
    doubleWritable: [],
    longestGapMs: 0,
    longestGapShard: null,
    failedInserts: {},
    checks: 0,
    notes: [],
    lostExamples: [],
    ...r,
    seconds: Math.round((performance.now() - started) / 100) / 10,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function runScenario(name: ScenarioName, options: FaultsBenchOptions): Promise<ScenarioResult> {
  const scenario: Scenario = SCENARIOS[name];
  if (scenario.cross) return runCrossScenario(name, scenario, options);
  const started = performance.now();
  const stage = await startStage(scenario.stage);
  const sets: Writers[] = [];
  let probes: Probes | undefined;
  try {
    const notes: string[] = [];
    const writerConfig = scenario.writerConfig?.(stage) ?? stage.config;
    const shards = Array.from({ length: stage.config.logicalShards }, (_, i) => i);
    await scenario.prepare?.(stage);
    probes = startProbes(() => stage.nodes, stage.config.schemaPrefix);
    sets.push(await startWriters('0', writerConfig, shards, scenario.routerOptions));
    // Gaps count from the moment the writers run (their router has started), not from its start.
    const writersFrom = performance.now();
    const context: ScenarioContext = {
      stage,
      note: (line) => {
        notes.push(line);
        options.onProgress?.(`  ${name}: ${line}`);
      },
      async redeploy(config) {
        // The application restarted with a new config: old writers stop, new ones start at once.
        const old = sets.at(-1) as Writers;
        sets.push(await startWriters(String(sets.length), config, shards, scenario.routerOptions));
        await stopOnce(old);
      },
    };
    await sleep(300);
    const endConfig = await (scenario.fault as NonNullable<Scenario['fault']>)(context);
    // The writers go on after the fault: a shard that stays unwritable shows as a long gap.
    await sleep(scenario.afterMs ?? 1000);
    await probes.check();
    const log = mergeLogs(await Promise.all(sets.map(stopOnce)));
    const gap = longestGap(log, shards, writersFrom, performance.now());
    const cleanup = await cleanupCluster(endConfig);
    notes.push(
      `cleanup: ${cleanup.settled.length} settled, ${cleanup.droppedCopies.length} old copies dropped, ${cleanup.fencedOnDiscovery.length} fenced on discovery, ${cleanup.conflicts.length} kept as conflicts`,
    );
    await options.beforeTally?.(stage, endConfig, log);
    await probes.check();
    const probed = await probes.stop();
    const tally = await tallyAcknowledged(endConfig, log.acknowledged);
    return {
      name,
      title: scenario.title,
      acknowledged: tally.acknowledged,
      lost: tally.lost,
      // One row per call: nothing can be half-applied, and the rows are the state (nothing to diverge).
      halfApplied: 0,
      duplicated: tally.duplicated,
      diverged: 0,
      hung: log.hung.length,
      doubleWritable: probed.doubleWritable,
      longestGapMs: gap.ms,
      longestGapShard: gap.shard,
      failedInserts: log.failed,
      checks: probed.checks,
      notes,
      lostExamples: [...tally.lostExamples, ...log.hung.map((t) => `HUNG insert ${t}`)],
      seconds: Math.round((performance.now() - started) / 100) / 10,
    };
  } finally {
    // After a failure too: writers and probes must not outlive their servers.
    await Promise.all(sets.map((w) => stopOnce(w).catch(() => {})));
    await probes?.stop().catch(() => {});
    scenario.done?.();
    await stage.close();
  }
}

/**
 * A scenario that writes across servers: its own writers, fault and count (faults-cross-scenarios.ts), with the
 * same probes for shards writable on two nodes and the same cleanup afterwards.
 */
async function runCrossScenario(
  name: ScenarioName,
  scenario: Scenario,
  options: FaultsBenchOptions,
): Promise<ScenarioResult> {
  const started = performance.now();
  const stage = await startStage(scenario.stage);
  let probes: Probes | undefined;
  try {
    const notes: string[] = [];
    const note = (line: string) => {
      notes.push(line);
      options.onProgress?.(`  ${name}: ${line}`);
    };
    await scenario.prepare?.(stage);
    probes = startProbes(() => stage.nodes, stage.config.schemaPrefix);
    const run = await (scenario.cross as NonNullable<Scenario['cross']>)({ stage, note });
    await probes.check();
    const cleanup = await cleanupCluster(run.config);
    notes.push(
      `cleanup: ${cleanup.settled.length} settled, ${cleanup.droppedCopies.length} old copies dropped, ${cleanup.conflicts.length} kept as conflicts`,
    );
    await probes.check();
    const probed = await probes.stop();
    const c = run.count;
    return {
      name,
      title: scenario.title,
      acknowledged: c.acknowledged,
      lost: c.lost,
      halfApplied: c.halfApplied,
      duplicated: c.duplicated,
      diverged: c.diverged,
      hung: c.hung,
      doubleWritable: probed.doubleWritable,
      longestGapMs: c.longestGapMs,
      longestGapShard: null,
      failedInserts: c.failed,
      checks: probed.checks,
      notes,
      lostExamples: c.examples,
      seconds: Math.round((performance.now() - started) / 100) / 10,
    };
  } finally {
    await probes?.stop().catch(() => {});
    scenario.done?.();
    await stage.close();
  }
}

/** A writer set's log: stop() once, the same log to every later caller. */
const stopped = new WeakMap<Writers, Promise<WriterLog>>();
function stopOnce(w: Writers): Promise<WriterLog> {
  let p = stopped.get(w);
  if (!p) {
    p = w.stop();
    stopped.set(w, p);
  }
  return p;
}

function mergeLogs(logs: readonly WriterLog[]): WriterLog {
  const merged: WriterLog = { acknowledged: [], failed: {}, hung: [] };
  for (const log of logs) {
    merged.acknowledged.push(...log.acknowledged);
    merged.hung.push(...log.hung);
    for (const [code, n] of Object.entries(log.failed)) merged.failed[code] = (merged.failed[code] ?? 0) + n;
  }
  return merged;
}

/**
 * The longest time any shard went without an acknowledged insert, from the writers' start to their stop, across
 * every writer set (an application redeployed mid-scenario counts as one application).
 */
function longestGap(log: WriterLog, shards: readonly number[], from: number, to: number) {
  let longest = { ms: 0, shard: null as number | null };
  for (const shard of shards) {
    const times = log.acknowledged.filter((a) => a.shard === shard).map((a) => a.at);
    times.sort((x, y) => x - y);
    let last = from;
    for (const t of [...times, to]) {
      if (t - last > longest.ms) longest = { ms: t - last, shard };
      last = t;
    }
  }
  return { ms: Math.round(longest.ms), shard: longest.shard };
}

export async function runFaultsBench(options: FaultsBenchOptions = {}): Promise<FaultsBenchResult> {
  const startedAt = new Date().toISOString();
  const scenarios: ScenarioResult[] = [];
  for (const name of options.scenarios ?? SCENARIO_NAMES) {
    if (name in TRANSFER_SCENARIOS) {
      const transfer = name as TransferScenarioName;
      options.onProgress?.(`${name}: ${TRANSFER_SCENARIOS[transfer].title}`);
      scenarios.push(await runTransferScenario(transfer, options));
      continue;
    }
    const move = name as ScenarioName;
    options.onProgress?.(`${name}: ${SCENARIOS[move].title}`);
    scenarios.push(await runScenario(move, options));
  }
  return {
    scenarios,
    faultsFound: faultsFound(scenarios),
    machine: { cpus: cpus().length, node: process.version },
    startedAt,
  };
}

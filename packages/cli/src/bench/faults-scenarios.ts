import type { ChildProcess } from 'node:child_process';
import { readShardMap } from 'shardflake/internal/catalog/shards.js';
import { type ClusterConfig, shardSchema } from 'shardflake/internal/config/config.js';
import { isShardflakeError } from 'shardflake/internal/errors/errors.js';
import { isFenced } from 'shardflake/internal/fence/fence.js';
import { isInterrupted, moveShard, moveShards } from 'shardflake/internal/move/move.js';
import { rebalanceCluster } from 'shardflake/internal/move/rebalance.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import type { RouterOptions } from 'shardflake/internal/router/router.js';
import { connectServer } from 'shardflake/internal/topology/connections.js';
import type { CrossContext, CrossCount } from './faults-cross.js';
import { CROSS_SCENARIOS } from './faults-cross-scenarios.js';
import type { Stage, StageOptions } from './faults-stage.js';

/**
 * The scenarios of `bench faults` (issue 21's faults, as an operator's bad day would bring them). Each names its
 * servers, what its writers' router is given, and the fault; faults.ts runs the writers, the probes, cleanup and
 * the count around it. A fault returns the config an operator would use afterwards (after a failover: server a is
 * the promoted node).
 */
export interface ScenarioContext {
  stage: Stage;
  /** Records what happened (the move's outcome, a pause) for the report. */
  note(line: string): void;
  /** The application restarts with `config` (new writers start, the old ones stop). */
  redeploy(config: ClusterConfig): Promise<void>;
}

export interface Scenario {
  title: string;
  stage: StageOptions;
  /** Before the writers start (data, replication settings). */
  prepare?: (stage: Stage) => Promise<void>;
  /** The config the writers' router starts with (default: the stage's full config). */
  writerConfig?: (stage: Stage) => ClusterConfig;
  routerOptions?: RouterOptions;
  /** The fault, while the insert writers run (every scenario but those with `cross`). */
  fault?(context: ScenarioContext): Promise<ClusterConfig>;
  /**
   * A scenario that writes across servers: its own writers, fault and count, in place of the insert writers
   * (faults-cross-scenarios.ts); returns the config an operator would use afterwards and the count.
   */
  cross?(context: CrossContext): Promise<{ config: ClusterConfig; count: CrossCount }>;
  /** How long the writers go on after the fault (default 1000 ms). */
  afterMs?: number;
  /** Once the scenario is over, whatever it ended (undoes what `prepare` set on this process). */
  done?: () => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function placements(stage: Stage) {
  const catalog = await connectServer(stage.config, stage.config.catalog);
  try {
    return (await readShardMap(catalog)).shards;
  } finally {
    await catalog.end();
  }
}

/** The first shard the catalog places on `server`. */
async function shardOn(stage: Stage, server: string): Promise<number> {
  const shard = (await placements(stage)).find((s) => s.server === server)?.shard;
  if (shard === undefined) throw new Error(`no shard on server ${server}`);
  return shard;
}

/** A move's outcome in one line (it may fail: a fault is the point). */
async function tryMove(context: ScenarioContext, run: () => Promise<{ pauseMs: number | null }>) {
  try {
    const r = await run();
    context.note(`move switched; writes paused ${Math.round(r.pauseMs ?? 0)} ms`);
    return true;
  } catch (error) {
    context.note(`move failed: ${(error as Error).message.split('\n')[0]}`);
    return false;
  }
}

/** Reruns a move until it is done, waiting out SHARD_BUSY while a dead mover's sessions are being ended. */
async function rerunMove(context: ScenarioContext, config: ClusterConfig, shard: number, to: string) {
  for (let i = 0; ; i++) {
    try {
      const r = await moveShard(config, shard, to);
      context.note(
        `rerun: ${r.resumedFrom ? `resumed after ${r.resumedFrom}` : 'moved'}; writes paused ${Math.round(r.pauseMs ?? 0)} ms`,
      );
      return;
    } catch (error) {
      if (!isShardflakeError(error, 'SHARD_BUSY') || i > 150) throw error;
      await sleep(100);
    }
  }
}

function exited(child: ChildProcess): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const out = { stdout: '', stderr: '' };
  child.stdout?.on('data', (d) => {
    out.stdout += d;
  });
  child.stderr?.on('data', (d) => {
    out.stderr += d;
  });
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, ...out })));
}

/** `cluster move` as a process, rerun until it succeeds (a killed run's sessions may hold the shard a moment). */
async function cliMoveUntilDone(context: ScenarioContext, shard: number, to: string): Promise<void> {
  for (let i = 0; ; i++) {
    const r = await exited(context.stage.cli(['cluster', 'move', '--shard', String(shard), '--to', to]));
    if (r.code === 0) {
      const resumed = r.stdout.match(/resumed after (\w+)/)?.[1];
      const paused = r.stdout.match(/writes paused (\S+ ms)/)?.[1];
      context.note(
        `rerun of the CLI: ${resumed ? `resumed after ${resumed}` : 'moved'}; writes paused ${paused}`,
      );
      return;
    }
    if (!/is being moved by another process|is locked by another process/.test(r.stderr) || i > 50)
      throw new Error(`cluster move failed: ${r.stderr.trim()}`);
    await sleep(200);
  }
}

/** Starts `cluster move` as a process holding after `step` (SHARDFLAKE_MOVE_HOLD_AFTER) and waits until it holds. */
async function cliMoveHeldAt(stage: Stage, shard: number, to: string, step: string, extra: string[] = []) {
  const child = stage.cli(['cluster', 'move', '--shard', String(shard), '--to', to, ...extra], {
    SHARDFLAKE_MOVE_HOLD_AFTER: step,
  });
  let stderr = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr?.on('data', (d) => {
      stderr += d;
      if (stderr.includes(`holding after ${step}`)) resolve();
    });
    child.on('close', () => reject(new Error(`cluster move exited before ${step}: ${stderr.trim()}`)));
  });
  return child;
}

function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    }
  });
}

/** A primary killed -9 during a move and its replica promoted; the lagging variants pause the replica's replay. */
const failoverStage: StageOptions = { servers: 2, replica: 'listed' };

export const SCENARIOS = {
  control: {
    title: 'a move with no fault (the harness itself)',
    stage: { servers: 2 },
    async fault(context) {
      const { stage } = context;
      await tryMove(context, async () => moveShard(stage.config, await shardOn(stage, 'a'), 'b'));
      return stage.config;
    },
  },
  'failover-in-the-pause': {
    title: 'failover during a move, replica streaming: primary killed -9 after the fence, before the switch',
    stage: failoverStage,
    prepare: (stage) => stage.syncReplica(),
    async fault(context) {
      const { stage } = context;
      const shard = await shardOn(stage, 'a');
      await tryMove(context, () =>
        moveShard(stage.config, shard, 'b', {
          afterStep: async (step) => {
            if (step === 'fenced') await stage.killPrimary();
          },
        }),
      );
      const t = performance.now();
      const after = await stage.failOver();
      context.note(`replica promoted in ${Math.round(performance.now() - t)} ms`);
      await rerunMove(context, after, shard, 'b');
      return after;
    },
  },
  'failover-lagging-replica': {
    title:
      'failover during a move, replica lagging (replay paused): the move must not switch; primary killed -9, replica promoted',
    stage: failoverStage,
    async prepare(stage) {
      await stage.syncReplica();
      await stage.pauseReplay();
    },
    async fault(context) {
      const { stage } = context;
      const shard = await shardOn(stage, 'a');
      await tryMove(context, () => moveShard(stage.config, shard, 'b', { replicaFenceTimeoutMs: 1000 }));
      await stage.killPrimary();
      const t = performance.now();
      const after = await stage.failOver();
      context.note(`replica promoted in ${Math.round(performance.now() - t)} ms`);
      return after;
    },
  },
  'failover-unlisted-replica': {
    title:
      "failover after a move, onto a replica the mover's config does not list, cut off (walsender stopped) before the fence: the application redeploys with the promoted node as server a",
    stage: { servers: 2, replica: 'unlisted' },
    async prepare(stage) {
      // Server a keeps one shard, the one that moves: rows acknowledged on a while its replica is cut off reach b
      // through the move, so none is lost to asynchronous replication alone.
      const map = await placements(stage);
      const others = map.filter((p) => p.server === 'a').slice(1);
      await moveShards(
        stage.config,
        others.map((p) => p.shard),
        'b',
      );
      await stage.cutOffReplica();
    },
    async fault(context) {
      const { stage } = context;
      const shard = await shardOn(stage, 'a');
      await tryMove(context, () => moveShard(stage.config, shard, 'b'));
      await stage.killPrimary();
      const t = performance.now();
      const after = await stage.failOver();
      context.note(`replica promoted in ${Math.round(performance.now() - t)} ms`);
      await context.redeploy(after);
      const promoted = (stage.replica as { url: string }).url;
      stage.nodes['a (promoted)'] = promoted;
      const client = await connect(promoted);
      try {
        const fenced = await isFenced(client, shardSchema(stage.config, shard));
        context.note(
          `the old copy of shard ${shard} on the promoted node is ${fenced ? 'fenced (by the redeployed router, before it served anything)' : 'NOT fenced'}`,
        );
      } finally {
        await client.end();
      }
      return after;
    },
  },
  'mover-killed-mid-copy': {
    title: 'the mover (cluster move) killed -9 in the middle of the copy, then rerun',
    stage: { servers: 2 },
    async prepare(stage) {
      await stage.fill('a', await shardOn(stage, 'a'), 300_000);
    },
    async fault(context) {
      const { stage } = context;
      const shard = await shardOn(stage, 'a');
      const child = stage.cli(['cluster', 'move', '--shard', String(shard), '--to', 'b']);
      const target = await connectServer(stage.config, 'b');
      try {
        let copied = 0;
        for (let i = 0; i < 600 && copied === 0; i++) {
          const { rows } = await target.query(
            'SELECT coalesce(sum(tuples_processed), 0)::int AS n FROM pg_stat_progress_copy',
          );
          copied = (rows[0] as { n: number }).n;
          if (copied === 0) await sleep(20);
        }
        await killed(child);
        context.note(`mover killed -9 with ${copied.toLocaleString('en-US')} rows copied`);
      } finally {
        await target.end();
      }
      await cliMoveUntilDone(context, shard, 'b');
      return stage.config;
    },
  },
  'mover-killed-in-the-pause': {
    title: 'the mover killed -9 in the write pause (tables locked), then rerun',
    stage: { servers: 2 },
    async fault(context) {
      const { stage } = context;
      const shard = await shardOn(stage, 'a');
      const child = await cliMoveHeldAt(stage, shard, 'b', 'cutover-locked');
      await killed(child);
      context.note('mover killed -9 holding the cutover lock');
      await cliMoveUntilDone(context, shard, 'b');
      return stage.config;
    },
  },
  'mover-frozen-in-the-pause': {
    title: 'the mover frozen (SIGSTOP) in the write pause, --pause-bound 2000, then killed and rerun',
    stage: { servers: 2 },
    async fault(context) {
      const { stage } = context;
      const shard = await shardOn(stage, 'a');
      const child = await cliMoveHeldAt(stage, shard, 'b', 'cutover-locked', ['--pause-bound', '2000']);
      child.kill('SIGSTOP');
      await sleep(3000);
      await killed(child);
      context.note('mover frozen 3 s holding the cutover lock, then killed');
      await cliMoveUntilDone(context, shard, 'b');
      return stage.config;
    },
  },
  'source-restarted-before-the-cutover': {
    title:
      'the source server restarted between the catch-up and the cutover (the move stopped there), then the move rerun: the resumed cutover waits for streaming before it pauses writes',
    stage: { servers: 2 },
    async fault(context) {
      const { stage } = context;
      const shard = await shardOn(stage, 'a');
      await moveShard(stage.config, shard, 'b', { stopAfter: 'synced' }).catch((error: unknown) => {
        if (!isInterrupted(error)) throw error;
      });
      const t = performance.now();
      await stage.restartA();
      context.note(`source stopped and started again in ${Math.round(performance.now() - t)} ms`);
      const r = await moveShard(stage.config, shard, 'b');
      context.note(
        `rerun resumed after ${r.resumedFrom}; writes paused ${Math.round(r.pauseMs ?? 0)} ms ${JSON.stringify(r.pauseSteps)}`,
      );
      return stage.config;
    },
  },
  'router-on-an-older-config': {
    title:
      "a rebalance onto a new server c while the writers' router has the old config (a, b); c's password from PGPASSWORD",
    stage: { servers: 3, initialServers: 2, logicalShards: 6 },
    writerConfig: (stage) => stage.initialConfig,
    async prepare(stage) {
      // The router's environment gives c's password (the catalog keeps addresses, never passwords).
      process.env.PGPASSWORD = decodeURIComponent(
        new URL((stage.servers[2] as { url: string }).url).password,
      );
    },
    async fault(context) {
      const { stage } = context;
      const r = await rebalanceCluster(stage.config);
      context.note(
        `rebalance moved ${r.results.length} shards to c; longest pause ${Math.round(Math.max(0, ...r.results.map((m) => m.pauseMs ?? 0)))} ms`,
      );
      return stage.config;
    },
    done() {
      delete process.env.PGPASSWORD;
    },
  },
  // Writes across servers (issue 29): transfers, unique claims and reference copies through faults.
  ...CROSS_SCENARIOS,
} satisfies Record<string, Scenario>;

export type ScenarioName = keyof typeof SCENARIOS;

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ClusterConfig } from 'shardflake/internal/config/config.js';
import { verifyLookups } from 'shardflake/internal/lookups/verify.js';
import { moveShard } from 'shardflake/internal/move/move.js';
import { checkReferenceTables } from 'shardflake/internal/reference/verify.js';
import { createRouter, type Router, type RouterOptions } from 'shardflake/internal/router/router.js';
import type { RouterEvent } from 'shardflake/internal/telemetry/events.js';
import { closeAll, connectAll } from 'shardflake/internal/topology/connections.js';
import {
  type CallLog,
  type CrossContext,
  type CrossScenario,
  countClaims,
  countReference,
  countTransfers,
  killTree,
  LOOKUP_CONFIG,
  mergeCallLogs,
  openAccounts,
  type Pair,
  REFERENCE_TABLES,
  recoverAll,
  startLoops,
  TRANSFER_TABLES,
  transfer,
  writeReference,
} from './faults-cross.js';
import type { Stage } from './faults-stage.js';

/**
 * The scenarios of `bench faults` that write across servers (issue 29): transfers through `withShards` with the
 * coordinator killed at each phase of its commit, with a participant and with the decision server killed -9 and
 * failed over, and with one of their shards moved; unique lookup values claimed by racing writers while a server
 * fails over; reference writes of a router on its old config through a move to a new server. Each runs its own
 * writers and count (faults-cross.ts); faults.ts adds the probes for shards writable twice, and cleanup.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const CHILD = fileURLToPath(new URL('./faults-transfer-child.js', import.meta.url));
/** What the writers' routers are given in a failover: a promotion is waited for, and followed quickly. */
const FOLLOW: RouterOptions = {
  telemetry: false,
  replicas: { failoverWaitMs: 30_000, rediscoverMs: 50 },
  // Background recovery as an application has it, a little quicker than the defaults so the run is short.
  transactions: { recoveryIntervalMs: 1000, inDoubtAfterMs: 5000 },
};

/** The shards the catalog places on each server, by server name. */
function shardsBy(router: Router): (server: string) => number[] {
  const all = Array.from({ length: router.logicalShards }, (_, s) => s);
  return (server) => all.filter((s) => router.placement(s).server === server);
}

/** What a router's background recovery settled, from its events. */
function recoveryCounter(): { seen(event: RouterEvent): void; readonly line: string } {
  let committed = 0;
  let rolledBack = 0;
  return {
    seen(event) {
      if (event.type !== 'transaction' || event.step !== 'done') return;
      if (event.phase === 'recover-commit') committed++;
      if (event.phase === 'recover-rollback') rolledBack++;
    },
    get line() {
      return `the writers' background recovery committed ${committed}, rolled back ${rolledBack}`;
    },
  };
}

/** Resolves once `check` holds, polling; fails after `ms`. */
async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`);
    await sleep(10);
  }
}

/**
 * Transfer writers in this process (one per pair) through a fault: `armKill` arms a kill -9 of the failing
 * server at the first transaction event that `at` matches, the server is failed over to its standby, the writers go
 * on, and recovery settles what is left. For the participant and the decision server.
 */
async function transfersThroughFailover(
  { stage, note }: CrossContext,
  pairsOf: (on: (server: string) => number[]) => [number, number][],
  at: { phase: string; step: string; server: string },
): Promise<{ config: ClusterConfig; count: Awaited<ReturnType<typeof countTransfers>> }> {
  const pid = await stage.primaryPid();
  let armed = false;
  let killed: string | undefined;
  const recovered = recoveryCounter();
  const router = await createRouter(stage.config, {
    ...FOLLOW,
    onEvent(event) {
      recovered.seen(event);
      if (!armed || event.type !== 'transaction') return;
      if (event.phase !== at.phase || event.step !== at.step || event.server !== at.server) return;
      armed = false;
      killTree(pid);
      killed = event.txid;
    },
  });
  try {
    const pairs = await openAccounts(router, pairsOf(shardsBy(router)));
    const loops = startLoops(pairs.length, 't.', (w, n, token) =>
      transfer(router, pairs[w] as Pair, n, token),
    );
    await sleep(800);
    armed = true;
    await until(() => killed !== undefined, 20_000, `a ${at.phase}:${at.step} on server ${at.server}`);
    note(`server ${at.server}'s primary killed -9 at ${at.phase}:${at.step} there (transaction ${killed})`);
    const t = performance.now();
    const after = await stage.failOver();
    note(`standby promoted in ${Math.round(performance.now() - t)} ms`);
    await sleep(1500);
    const log = await loops.stop();
    const settled = await recoverAll(after);
    note(
      `${recovered.line}; recovery afterwards: ${settled.committed} committed, ${settled.rolledBack} rolled back`,
    );
    return { config: after, count: await countTransfers(after, pairs, log) };
  } finally {
    await router.close();
  }
}

/** Parses a child's ACK lines into a log as they come (the writer is in the token: `<prefix><writer>-<n>`). */
function childLog(prefix: string): { log: CallLog; line: (text: string) => void } {
  const log: CallLog = { acknowledged: [], failed: {}, hung: [], from: performance.now(), to: 0 };
  return {
    log,
    line(text) {
      const m = /^ACK (\S+)$/.exec(text);
      if (m) {
        const token = m[1] as string;
        const writer = Number(token.slice(prefix.length).split('-')[0]);
        log.acknowledged.push({ token, writer, at: performance.now() });
      }
    },
  };
}

/** The coordinator's points of death, in commit order (faults-transfer-child.ts). */
const COORDINATOR_POINTS = ['prepare:done', 'decide:done', 'commit-prepared:done'] as const;

export const CROSS_SCENARIOS = {
  'transfers-coordinator-killed': {
    title:
      'transfers with withShards across three servers, the coordinator (a router process) killed -9 at each phase of a commit: after a PREPARE, after the decision, after a COMMIT PREPARED (before it told its caller); each time recovery settles what it left and a new coordinator goes on',
    stage: { servers: 3, logicalShards: 6, config: { tables: TRANSFER_TABLES } },
    async cross({ stage, note }) {
      const opener = await createRouter(stage.config, { telemetry: false });
      const pairs = await openAccounts(
        opener,
        (() => {
          const on = shardsBy(opener);
          const [a, b, c] = [on('a'), on('b'), on('c')];
          return [
            [a[0], b[0]],
            [b[1], c[0]],
            [c[1], a[1]],
          ] as [number, number][];
        })(),
      ).finally(() => opener.close());
      const wire = JSON.stringify(
        pairs.map((p) => ({ x: [p.x.shard, `${p.x.id}`], y: [p.y.shard, `${p.y.id}`] })),
      );
      const logs: CallLog[] = [];
      for (const [i, point] of COORDINATOR_POINTS.entries()) {
        const prefix = `k${i}.`;
        const { log, line } = childLog(prefix);
        logs.push(log);
        const child = spawn(process.execPath, [CHILD, stage.configFile, wire, prefix, point, '20'], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        let err = '';
        child.stderr.on('data', (d) => {
          err += d;
        });
        const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
        const at = await new Promise<string>((resolve, reject) => {
          child.stdout.on('data', (d) => {
            out += d;
            const lines = out.split('\n');
            out = lines.pop() ?? '';
            for (const l of lines) {
              line(l);
              if (l.startsWith('AT ')) resolve(l);
            }
          });
          void exited.then(() => reject(new Error(`the coordinator ended before ${point}: ${err.trim()}`)));
          setTimeout(
            () => reject(new Error(`the coordinator did not reach ${point} in 60 s`)),
            60_000,
          ).unref();
        });
        child.kill('SIGKILL');
        await exited;
        log.to = performance.now();
        // What it left prepared holds its rows' locks: settled before the next coordinator starts (as any
        // router's background recovery would, a little later).
        const settled = await recoverAll(stage.config);
        note(
          `coordinator killed -9 at ${point} (transaction ${at.split(' ')[2]}) after ${log.acknowledged.length} transfers; recovery: ${settled.committed} committed, ${settled.rolledBack} rolled back`,
        );
      }
      // The application comes back and goes on: nothing left behind gets in its way.
      const router = await createRouter(stage.config, { telemetry: false });
      try {
        const loops = startLoops(pairs.length, 'after.', (w, n, token) =>
          transfer(router, pairs[w] as Pair, n, token),
        );
        await sleep(1000);
        logs.push(await loops.stop());
      } finally {
        await router.close();
      }
      return { config: stage.config, count: await countTransfers(stage.config, pairs, mergeCallLogs(logs)) };
    },
  },
  'transfers-participant-failover': {
    title:
      "transfers with withShards, a participant's primary (c) killed -9 right after a PREPARE on it and its synchronous standby promoted; the writers go on, recovery settles the prepared transactions on the promoted node",
    stage: {
      servers: 3,
      replica: 'listed',
      replicaOf: 'c',
      logicalShards: 6,
      config: { tables: TRANSFER_TABLES },
    },
    prepare: (stage) => stage.syncReplica(),
    cross: (context) =>
      transfersThroughFailover(
        context,
        (on) =>
          [
            [on('a')[0], on('c')[0]],
            [on('b')[0], on('c')[1]],
            [on('a')[1], on('b')[1]],
          ] as [number, number][],
        { phase: 'prepare', step: 'done', server: 'c' },
      ),
  },
  'transfers-decision-server-failover': {
    title:
      "transfers with withShards, the decision server (a, every transaction's last agent) killed -9 as it was about to commit a decision, its synchronous standby promoted; the writers go on, recovery settles every participant by the decisions the promoted node holds",
    stage: { servers: 3, replica: 'listed', logicalShards: 6, config: { tables: TRANSFER_TABLES } },
    prepare: (stage) => stage.syncReplica(),
    cross: (context) =>
      transfersThroughFailover(
        context,
        (on) =>
          [
            [on('a')[0], on('b')[0]],
            [on('a')[1], on('c')[0]],
            [on('b')[1], on('c')[1]],
          ] as [number, number][],
        { phase: 'decide', step: 'start', server: 'a' },
      ),
  },
  'transfers-shard-moved': {
    title: 'transfers with withShards between a and b while one of their shards moves to a new server c',
    stage: { servers: 3, initialServers: 2, logicalShards: 4, config: { tables: TRANSFER_TABLES } },
    async cross({ stage, note }) {
      const router = await createRouter(stage.config, { telemetry: false });
      try {
        const on = shardsBy(router);
        const pairs = await openAccounts(router, [
          [on('a')[0] as number, on('b')[0] as number],
          [on('a')[1] as number, on('b')[1] as number],
        ]);
        const loops = startLoops(pairs.length, 't.', (w, n, token) =>
          transfer(router, pairs[w] as Pair, n, token),
        );
        await sleep(500);
        const moved = pairs[0]?.x.shard as number;
        const r = await moveShard(stage.config, moved, 'c');
        note(`shard ${moved} moved to c; writes paused ${Math.round(r.pauseMs ?? 0)} ms`);
        await sleep(1000);
        const log = await loops.stop();
        const settled = await recoverAll(stage.config);
        note(`recovery afterwards: ${settled.committed} committed, ${settled.rolledBack} rolled back`);
        return { config: stage.config, count: await countTransfers(stage.config, pairs, log) };
      } finally {
        await router.close();
      }
    },
  },
  'lookups-racing-claims': {
    title:
      'a unique lookup value claimed by six writers at once from shards on two servers, value after value, while server a (with a synchronous standby) is killed -9 as a claim across servers commits its decision there, and failed over',
    stage: { servers: 2, replica: 'listed', logicalShards: 4, config: LOOKUP_CONFIG },
    prepare: (stage) => stage.syncReplica(),
    async cross({ stage, note }) {
      const writers = 6;
      const pid = await stage.primaryPid();
      let armed = false;
      let killed: string | undefined;
      const recovered = recoveryCounter();
      const router = await createRouter(stage.config, {
        ...FOLLOW,
        onEvent(event) {
          recovered.seen(event);
          if (!armed || event.type !== 'transaction' || event.phase !== 'decide' || event.step !== 'start')
            return;
          if (event.server !== 'a') return;
          armed = false;
          killTree(pid);
          killed = event.txid;
        },
      });
      const emailOf = (token: string) => `claim-${token.split('-').at(-1)}@example.com`;
      try {
        const loops = startLoops(writers, 'c.', (w, _n, token) =>
          router.insert('users', { email: emailOf(token), token }, { shard: w % router.logicalShards }),
        );
        await sleep(800);
        armed = true;
        await until(() => killed !== undefined, 20_000, 'a decide:start on server a');
        note(
          `server a's primary killed -9 as a claim's decision was about to commit there, its entry prepared on b (transaction ${killed})`,
        );
        const t = performance.now();
        const after = await stage.failOver();
        note(`standby promoted in ${Math.round(performance.now() - t)} ms`);
        await sleep(1500);
        const log = await loops.stop();
        const settled = await recoverAll(after);
        note(
          `${recovered.line}; recovery afterwards: ${settled.committed} committed, ${settled.rolledBack} rolled back; refused claims: ${log.failed.UNIQUE_VIOLATION ?? 0}`,
        );
        // Refused claims are the point of the race, not failures.
        delete log.failed.UNIQUE_VIOLATION;
        const clients = await connectAll(after);
        const problems = await verifyLookups(after, clients).finally(() => closeAll(clients));
        return {
          config: after,
          count: await countClaims(
            after,
            log,
            writers,
            emailOf,
            problems.map((p) => p.message),
          ),
        };
      } finally {
        await router.close();
      }
    },
  },
  'reference-through-a-move': {
    title:
      "reference writes (two tables, both orders) by a router on its old config (a, b) while `cluster move` (config a, b, c) moves a shard to the new server c; c's password from PGPASSWORD",
    stage: { servers: 3, initialServers: 2, logicalShards: 6, config: { referenceTables: REFERENCE_TABLES } },
    prepare: async (stage: Stage) => {
      process.env.PGPASSWORD = decodeURIComponent(
        new URL((stage.servers[2] as { url: string }).url).password,
      );
    },
    done() {
      delete process.env.PGPASSWORD;
    },
    async cross({ stage, note }) {
      const writers = 4;
      const router = await createRouter(stage.initialConfig, { telemetry: false });
      try {
        const loops = startLoops(writers, 'r.', (_w, n, token) => writeReference(router, n, token));
        await sleep(500);
        const shard = shardsBy(router)('a')[0] as number;
        const move = stage.cli(['cluster', 'move', '--shard', String(shard), '--to', 'c']);
        let out = '';
        move.stdout?.on('data', (d) => {
          out += d;
        });
        move.stderr?.on('data', (d) => {
          out += d;
        });
        const code = await new Promise<number | null>((resolve) => move.on('close', resolve));
        note(
          code === 0
            ? `cluster move --shard ${shard} --to c: writes paused ${out.match(/writes paused (\S+ ms)/)?.[1] ?? '?'}`
            : `cluster move failed: ${out.trim().split('\n').at(-1)}`,
        );
        await sleep(1000);
        const log = await loops.stop();
        const problems = (await checkReferenceTables(stage.config)).map((p) => p.message);
        // The old router's shard session on c reads the last write.
        const last = log.acknowledged.at(-1)?.token;
        const seen = last
          ? await router.withShard({ shard }, async (s) =>
              Number((await s.query('SELECT count(*) AS n FROM plans WHERE token = $1', [last])).rows[0]?.n),
            )
          : 0;
        note(
          `a shard session on ${router.placement(shard).server} reads the last write: ${seen === 1 ? 'yes' : 'NO'}`,
        );
        if (seen !== 1) problems.push(`a shard session on c does not read ${last}`);
        return {
          config: stage.config,
          count: await countReference(stage.config, ['a', 'b', 'c'], log, writers, problems),
        };
      } finally {
        await router.close();
      }
    },
  },
} satisfies Record<string, CrossScenario>;

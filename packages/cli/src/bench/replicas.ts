import { startEmbeddedServer } from '@shardflake/embedded';
import { replicaCaughtUp, startEmbeddedReplica } from '@shardflake/embedded/replica';
import type { ShardflakeId } from 'shardflake';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { createRouter, type Router } from 'shardflake/internal/router/router.js';
import type { OperationEvent } from 'shardflake/internal/telemetry/events.js';
import { telemetryHook } from 'shardflake/internal/telemetry/telemetry.js';
import { median } from './stats.js';

/**
 * `shardflake bench replicas`: two questions and a control, each answered side by side in one run on embedded servers.
 *
 * 1. Read throughput with one streaming replica serving reads against the primary alone: `clients` concurrent
 *    readOnly withShard reads (one primary-key SELECT each) for `sliceMs` per side, through a router whose server lists
 *    [primary, replica] and through one whose server lists the primary only.
 * 2. The router's cost of its OpenTelemetry hook with the API present but no SDK installed: the same reads on the
 *    primary through a router with `telemetry: true` (the default) and one with `telemetry: false`.
 * 3. A control: two identical routers measured the same way (the ratio should be 1; its spread is the noise).
 *
 * The sides alternate in short slices within every round (A B, then B A in the next round), so drift in the
 * machine's load falls on both; each ratio is the median of the per-round ratios, with the spread (min–max) next
 * to it. The hook is also timed alone (ns per event), which the machine's noise cannot hide.
 */
export interface ReplicaBenchOptions {
  rounds?: number;
  /** Milliseconds per side per round: short slices, so a change in the machine's load hits both sides alike. */
  sliceMs?: number;
  clients?: number;
  rows?: number;
  onProgress?: (message: string) => void;
}

export interface RatioResult {
  /** Operations per second of each side, per round. */
  baseline: number[];
  candidate: number[];
  /** Median of candidate / baseline over rounds, and the smallest and largest round ratio. */
  ratio: number;
  min: number;
  max: number;
}

export interface ReplicaBenchResult {
  rounds: number;
  sliceMs: number;
  clients: number;
  /** baseline: primary only; candidate: primary + one replica serving reads. */
  replicaReads: RatioResult;
  /** baseline: telemetry off; candidate: telemetry on (API, no SDK). */
  telemetry: RatioResult;
  /** Control: two identical routers (telemetry off) measured the same way; its spread is this run's noise floor. */
  control: RatioResult;
  /** Share of reads the replica served on the replica side. */
  replicaShare: number;
  /** The telemetry hook alone, no SDK: nanoseconds per operation event (median of 5 runs of 100 000 events). */
  hookNsPerEvent: number;
  /** The hook's CPU time per second at the telemetry side's median throughput, as a share of one core. */
  hookCpuShare: number;
}

/** Times the hook by itself, so the cost is known even when the machine's noise hides it in the side-by-side. */
function hookCost(): number {
  const hook = telemetryHook();
  const event: OperationEvent = {
    type: 'operation',
    operation: 'withShard',
    shards: [3],
    servers: ['a'],
    nodes: [{ node: 'postgres://postgres:****@127.0.0.1:5432/app', role: 'replica' }],
    waitMs: 0.1,
    totalMs: 1.2,
    retries: 0,
    retryReasons: [],
  };
  const runs: number[] = [];
  for (let run = 0; run < 5; run++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < 100_000; i++) hook(event);
    runs.push(Number(process.hrtime.bigint() - started) / 100_000);
  }
  return median(runs);
}

const TABLE = 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), body text NOT NULL)';

async function readLoop(
  router: Router,
  ids: readonly ShardflakeId[],
  clients: number,
  ms: number,
): Promise<number> {
  let done = 0;
  const until = performance.now() + ms;
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      for (let i = c; performance.now() < until; i += clients) {
        const id = ids[i % ids.length] as ShardflakeId;
        await router.withShard(
          { id },
          async (s) => (await s.query('SELECT body FROM items WHERE id = $1', [id])).rows,
          { readOnly: true },
        );
        done++;
      }
    }),
  );
  return done / (ms / 1000);
}

function ratios(baseline: number[], candidate: number[]): RatioResult {
  const each = candidate.map((c, i) => c / (baseline[i] as number));
  return { baseline, candidate, ratio: median(each), min: Math.min(...each), max: Math.max(...each) };
}

export async function benchReplicas(options: ReplicaBenchOptions = {}): Promise<ReplicaBenchResult> {
  const rounds = options.rounds ?? 30;
  const sliceMs = options.sliceMs ?? 500;
  const clients = options.clients ?? 8;
  const rowCount = options.rows ?? 2000;
  const say = options.onProgress ?? (() => {});
  const primary = await startEmbeddedServer('bench-primary');
  const stops: (() => Promise<void>)[] = [() => primary.stop()];
  try {
    const replica = await startEmbeddedReplica(primary);
    stops.unshift(() => replica.stop());
    const raw = { catalog: 'a', logicalShards: 8, tables: { items: TABLE } };
    const direct = validateConfig({ ...raw, servers: { a: primary.url } }, 'bench');
    const both = validateConfig({ ...raw, servers: { a: [primary.url, replica.url] } }, 'bench');
    await initCluster(direct);
    const loader = await createRouter(direct, { listen: false });
    const ids = await loader.insertMany(
      'items',
      Array.from({ length: rowCount }, (_, i) => ({ body: `item ${i}` })),
      { key: () => 0 },
    );
    const spread = await Promise.all(
      Array.from({ length: rowCount }, (_, i) => loader.insert('items', { body: `row ${i}` }, { key: i })),
    );
    await loader.close();
    ids.push(...spread);
    await replicaCaughtUp(primary, replica);

    let replicaReads = 0;
    let allReads = 0;
    const routers = {
      primaryOnly: await createRouter(direct, { listen: false, poolSize: clients }),
      withReplica: await createRouter(both, {
        listen: false,
        poolSize: clients,
        onEvent: (e) => {
          if (e.type !== 'operation') return;
          allReads++;
          if (e.nodes.every((n) => n.role === 'replica')) replicaReads++;
        },
      }),
      telemetryOff: await createRouter(direct, { listen: false, poolSize: clients, telemetry: false }),
      telemetryOn: await createRouter(direct, { listen: false, poolSize: clients }),
      controlA: await createRouter(direct, { listen: false, poolSize: clients, telemetry: false }),
      controlB: await createRouter(direct, { listen: false, poolSize: clients, telemetry: false }),
    };
    try {
      // warm every pool and plan cache before measuring
      for (const r of Object.values(routers)) await readLoop(r, ids, clients, 300);
      const rr = { base: [] as number[], cand: [] as number[] };
      const tt = { base: [] as number[], cand: [] as number[] };
      const cc = { base: [] as number[], cand: [] as number[] };
      const ms = sliceMs;
      for (let round = 0; round < rounds; round++) {
        const flip = round % 2 === 1;
        const pair = async (
          base: Router,
          cand: Router,
          into: { base: number[]; cand: number[] },
        ): Promise<void> => {
          if (flip) {
            const c = await readLoop(cand, ids, clients, ms);
            into.base.push(await readLoop(base, ids, clients, ms));
            into.cand.push(c);
          } else {
            into.base.push(await readLoop(base, ids, clients, ms));
            into.cand.push(await readLoop(cand, ids, clients, ms));
          }
        };
        await pair(routers.primaryOnly, routers.withReplica, rr);
        await pair(routers.telemetryOff, routers.telemetryOn, tt);
        await pair(routers.controlA, routers.controlB, cc);
        if ((round + 1) % 5 === 0 || round + 1 === rounds)
          say(
            `round ${round + 1}/${rounds}: replica ${((rr.cand.at(-1) as number) / (rr.base.at(-1) as number)).toFixed(3)}×, telemetry ${((tt.cand.at(-1) as number) / (tt.base.at(-1) as number)).toFixed(3)}×`,
          );
      }
      const hookNsPerEvent = hookCost();
      return {
        rounds,
        sliceMs,
        clients,
        replicaReads: ratios(rr.base, rr.cand),
        telemetry: ratios(tt.base, tt.cand),
        control: ratios(cc.base, cc.cand),
        replicaShare: allReads ? replicaReads / allReads : 0,
        hookNsPerEvent,
        hookCpuShare: (hookNsPerEvent * median(tt.cand)) / 1e9,
      };
    } finally {
      await Promise.all(Object.values(routers).map((r) => r.close()));
    }
  } finally {
    for (const stop of stops) await stop().catch(() => {});
  }
}

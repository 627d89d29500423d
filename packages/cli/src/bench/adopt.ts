import { cpus, loadavg } from 'node:os';
import { pipeline } from 'node:stream/promises';
import { startEmbeddedServers } from '@shardflake/embedded';
import { planAdoption, runAdoption } from 'shardflake/internal/adopt/adopt.js';
import { adoptionNames } from 'shardflake/internal/adopt/run.js';
import { slotState } from 'shardflake/internal/adopt/slot.js';
import { requestAdoptCutover } from 'shardflake/internal/catalog/adopt.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { copyFrom, copyTo } from 'shardflake/internal/postgres/copy-streams.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { connectServer } from 'shardflake/internal/topology/connections.js';

/**
 * `shardflake bench adopt`: a live source of `users` users and `photos` photos (bigserial ids, a unique email)
 * adopted into two embedded servers while a router writer inserts photos the whole time (through the source first,
 * then through the shards after the switch). Measured in one run:
 * - the copy against the baseline: the same rows piped `COPY … TO STDOUT | COPY … FROM STDIN` into one server;
 * - how far the stream stays behind the writer (bytes of WAL not yet applied, sampled every 200 ms);
 * - the cutover's write pause as the adoption measures it, and the longest write the router writer saw;
 * - every acknowledged write found exactly once in the cluster.
 */
export interface AdoptBenchOptions {
  users: number;
  photos: number;
  shards: number;
  /** How long the writer runs while the stream applies its changes, before the cutover (ms). */
  streamMs: number;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface AdoptBenchResult {
  users: number;
  photos: number;
  shards: number;
  copy: { ms: number; baselineMs: number; ratio: number; targetRatio: number; meetsTarget: boolean };
  lag: { samples: number; maxBytes: number; p50Bytes: number; maxSeconds: number };
  cutover: {
    pauseMs: number;
    verifyPauseMs: number;
    verifyMs: number;
    longestWriteMs: number;
    targetMs: number;
    meetsTarget: boolean;
  };
  writes: { acknowledged: number; found: number; lost: number; doubled: number; failed: number };
  changesApplied: number;
  machine: { cpus: number; node: string; loadAverage: number[] };
}

const SOURCE = (users: number, photos: number) => `
CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE, name text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE photos (id bigserial PRIMARY KEY, user_id bigint NOT NULL REFERENCES users (id), caption text, likes integer NOT NULL DEFAULT 0);
CREATE INDEX photos_user_id ON photos (user_id);
INSERT INTO users (email, name) SELECT 'user' || g || '@example.com', 'User ' || g FROM generate_series(1, ${users}) g;
INSERT INTO photos (user_id, caption, likes) SELECT 1 + g % ${users}, 'photo number ' || g, g % 100 FROM generate_series(1, ${photos}) g;
ANALYZE users; ANALYZE photos;`;

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;

export async function runAdoptBench(o: AdoptBenchOptions): Promise<AdoptBenchResult> {
  const servers = await startEmbeddedServers(3, {});
  const [source, a, b] = servers as [(typeof servers)[0], (typeof servers)[0], (typeof servers)[0]];
  try {
    o.onProgress?.('source', 0, 1);
    const s = await connect(source.url);
    await s.query(SOURCE(o.users, o.photos));
    await s.end();

    // Baseline: the same rows piped into one server.
    const baseline = await connect(a.url);
    await baseline.query(
      'CREATE SCHEMA baseline; CREATE TABLE baseline.users (id bigint PRIMARY KEY, email text NOT NULL, name text NOT NULL, created_at timestamptz NOT NULL); CREATE TABLE baseline.photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption text, likes integer NOT NULL)',
    );
    const reader = await connect(source.url);
    const started = performance.now();
    for (const t of ['users', 'photos'])
      await pipeline(
        reader.query(copyTo(`COPY ${t} TO STDOUT`)),
        baseline.query(copyFrom(`COPY baseline.${t} FROM STDIN`)),
      );
    const baselineMs = performance.now() - started;
    await baseline.query('DROP SCHEMA baseline CASCADE');
    await Promise.all([reader.end(), baseline.end()]);

    const plan = await planAdoption({
      from: source.url,
      root: 'users',
      servers: { a: a.url, b: b.url },
      logicalShards: o.shards,
    });
    const config = validateConfig(plan.config, 'bench adopt');

    // The writer: through a router made once the cluster exists, so it follows the switch.
    const acked: string[] = [];
    let failed = 0;
    let longestWriteMs = 0;
    let writing = true;
    let writer: Promise<void> | undefined;
    let router: Awaited<ReturnType<typeof createRouter>> | undefined;
    const startWriter = async () => {
      router = await createRouter(config, { writeRetryMs: 30_000 });
      const r = router;
      writer = (async () => {
        for (let i = 0; writing; i++) {
          const user = BigInt(1 + ((i * 7919) % o.users));
          const at = performance.now();
          try {
            await r.insert('photos', { user_id: user, caption: `w-${i}` }, { id: user as never });
            acked.push(`w-${i}`);
          } catch {
            failed++;
          }
          longestWriteMs = Math.max(longestWriteMs, performance.now() - at);
          await new Promise((resolve) => setTimeout(resolve, 2));
        }
      })();
    };

    const lag: number[] = [];
    let sampler: NodeJS.Timeout | undefined;
    let copiedAt = 0;
    const result = await runAdoption(config, {
      onProgress: (p) => {
        if (p.phase !== 'streaming') o.onProgress?.(p.phase, p.done, p.total);
      },
      afterStep: async (step) => {
        if (step === 'created') await startWriter();
        if (step === 'copied') {
          copiedAt = performance.now();
          const probe = await connect(source.url);
          const catalog = await connectServer(config, config.catalog);
          sampler = setInterval(async () => {
            const state = await slotState(probe, adoptionNames(config).slot).catch(() => null);
            if (state?.exists) lag.push(Number(state.behindBytes));
            if (performance.now() - copiedAt > o.streamMs) {
              clearInterval(sampler);
              await requestAdoptCutover(catalog).catch(() => {});
              await Promise.all([probe.end(), catalog.end()]).catch(() => {});
            }
          }, 200);
        }
        if (step === 'fenced' || step === 'verified') clearInterval(sampler);
      },
    });
    // A moment of writes on the shards, then the writer stops.
    await new Promise((resolve) => setTimeout(resolve, 500));
    writing = false;
    await writer;
    const captions = new Map<string, number>();
    const { rows } = (await router?.sql(
      "SELECT caption, count(*) AS n FROM photos WHERE caption LIKE 'w-%' GROUP BY caption",
    )) ?? { rows: [] };
    for (const r of rows as { caption: string; n: bigint }[]) captions.set(r.caption, Number(r.n));
    await router?.close();
    let lost = 0;
    let doubled = 0;
    for (const c of acked) {
      const n = captions.get(c) ?? 0;
      if (n === 0) lost++;
      if (n > 1) doubled++;
    }
    const sorted = [...lag].sort((x, y) => x - y);
    const copyMs = result.copyMs ?? 0;
    const pauseMs = result.cutover?.pauseMs ?? 0;
    return {
      users: o.users,
      photos: o.photos,
      shards: o.shards,
      copy: {
        ms: Math.round(copyMs),
        baselineMs: Math.round(baselineMs),
        ratio: Math.round((copyMs / baselineMs) * 100) / 100,
        targetRatio: 2,
        meetsTarget: copyMs <= 2 * baselineMs,
      },
      lag: {
        samples: lag.length,
        maxBytes: sorted[sorted.length - 1] ?? 0,
        p50Bytes: percentile(sorted, 0.5),
        maxSeconds: 0,
      },
      cutover: {
        pauseMs: Math.round(pauseMs),
        verifyPauseMs: Math.round(result.cutover?.verifyPauseMs ?? 0),
        verifyMs: Math.round(result.cutover?.verifyMs ?? 0),
        longestWriteMs: Math.round(longestWriteMs),
        targetMs: 1000,
        meetsTarget: pauseMs <= 1000,
      },
      writes: { acknowledged: acked.length, found: captions.size, lost, doubled, failed },
      changesApplied: result.changesApplied,
      machine: {
        cpus: cpus().length,
        node: process.version,
        loadAverage: loadavg().map((l) => Math.round(l * 100) / 100),
      },
    };
  } finally {
    await Promise.all(servers.map((x) => x.stop()));
  }
}

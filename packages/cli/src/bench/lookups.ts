import { cpus, loadavg } from 'node:os';
import { startEmbeddedServers } from '@shardflake/embedded';
import type pg from 'pg';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { createPool } from 'shardflake/internal/postgres/connect.js';
import { createRouter } from 'shardflake/internal/router/router.js';
import { percentile } from './stats.js';

/**
 * `bench lookups`: what a lookup costs, side by side in one run on two embedded servers, one client, operations of
 * the two sides interleaved in blocks of 50 (so a slow moment of the machine hits both):
 *
 * - login by email: `router.lookup('user_email', email, { fetch: true })` on a cluster of 64 shards (two reads in
 *   sequence: the entry in the email's shard, then the owner's row, which the owner check returns — the target's
 *   figure), and `router.lookup` then `router.get` (three reads), vs `SELECT * FROM users WHERE email = $1` on one
 *   table with a unique index, on one server, same rows; and, as the floor of any lookup, two plain reads in
 *   sequence on that one table (email → id, then id → row);
 * - sign-up: `router.insert` into the table with the unique lookup (the row, its entry in the shard of the email's
 *   hash — on the other server half of the time, then a two-phase commit — in one atomic commit) vs a plain
 *   `INSERT … RETURNING id` into the one table (its unique index checked by PostgreSQL), and vs `router.insert`
 *   into a sharded table without a lookup (what the lookup itself adds).
 * Statements are unprepared on every side (the common path), pools warm. `cold` times a new router's first call
 * against a new pool's first query (connections opened, the lookup's readiness read from the catalog once).
 * Latencies in ms; ratios are lookup / baseline. The load average before and after is reported: on a shared
 * machine, compare runs only at similar loads.
 */
export interface LookupsBenchOptions {
  /** Rows loaded into both sides before measuring (default 20,000). */
  rows?: number;
  /** Measured operations per side and kind (default 2,000). */
  samples?: number;
  /** Logical shards (default 64). */
  shards?: number;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface Latency {
  p50Ms: number;
  p99Ms: number;
  count: number;
}

export interface LookupsBenchResult {
  server: { version: string; embedded: true };
  machine: { cpus: number; node: string };
  settings: { rows: number; samples: number; shards: number; servers: number };
  login: {
    /** `lookup(…, { fetch: true })`: the owner check returns the row, two reads. */
    lookupFetch: Latency;
    /** `lookup` then `get`: three reads. */
    lookupThenGet: Latency;
    oneTable: Latency;
    /** Two reads in sequence on the one table: what any lookup (entry, then row) costs at least. */
    twoReadsOneTable: Latency;
    /** lookupFetch / oneTable: the target's figure. */
    p50Ratio: number;
    p99Ratio: number;
    thenGetP50Ratio: number;
    floorP50Ratio: number;
    cold: { routerMs: number; oneTableMs: number };
  };
  signUp: {
    lookup: Latency;
    /** The same sign-ups, split by where the email's entry lived. */
    entrySameServer: Latency;
    entryOtherServer: Latency;
    oneTable: Latency;
    routerNoLookup: Latency;
    p50Ratio: number;
    p99Ratio: number;
    p50RatioVsRouterNoLookup: number;
    cold: { routerMs: number; oneTableMs: number };
  };
  load: { before: number; after: number };
}

const BLOCK = 50;

function latency(samples: number[]): Latency {
  return {
    p50Ms: round(percentile(samples, 50)),
    p99Ms: round(percentile(samples, 99)),
    count: samples.length,
  };
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await fn();
  return performance.now() - started;
}

export async function runLookupsBench(options: LookupsBenchOptions = {}): Promise<LookupsBenchResult> {
  const rows = options.rows ?? 20_000;
  const samples = options.samples ?? 2000;
  const shards = options.shards ?? 64;
  const progress = options.onProgress ?? (() => {});
  const loadBefore = loadavg()[0] as number;
  const servers = await startEmbeddedServers(2);
  try {
    const users = 'id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text';
    const config = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: shards,
        tables: {
          users: `CREATE TABLE users (${users})`,
          plain_users: `CREATE TABLE plain_users (${users})`,
        },
        lookups: { user_email: { table: 'users', column: 'email', unique: true } },
      },
      'bench config',
    );
    await initCluster(config, { onProgress: (d, n) => progress('init', d, n) });
    const routerOptions = { poolSize: 4 };
    const router = await createRouter(config, routerOptions);
    // The baseline: one table with a unique index, on server a, in a schema of its own.
    const pool: pg.Pool = createPool(servers[0]?.url as string, {
      max: 4,
      applicationName: 'bench one table',
    });
    try {
      await pool.query(`CREATE SCHEMA one;
        CREATE TABLE one.users (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL, email text UNIQUE)`);
      const version = String((await pool.query('SHOW server_version')).rows[0].server_version);
      const email = (i: number) => `user${i}@example.com`;
      for (let i = 0; i < rows; i += 2000) {
        const batch = Array.from({ length: Math.min(2000, rows - i) }, (_, j) => ({
          name: `user${i + j}`,
          email: email(i + j),
        }));
        await router.insertMany('users', batch, { key: (r) => r.name });
        await pool.query(
          'INSERT INTO one.users (name, email) SELECT n, e FROM unnest($1::text[], $2::text[]) AS t(n, e)',
          [batch.map((r) => r.name), batch.map((r) => r.email)],
        );
        progress('load', i + batch.length, rows);
      }
      await pool.query('ANALYZE one.users');
      let pick = 7;
      const someone = () => {
        pick = (pick * 48271) % 2147483647;
        return email(pick % rows);
      };
      const loginLookup = async () => {
        const hit = await router.lookup('user_email', someone());
        if (!hit) throw new Error('bench: a loaded email was not found');
        await router.get('users', hit.id);
      };
      const loginFetch = async () => {
        const hit = await router.lookup('user_email', someone(), { fetch: true });
        if (!hit?.row) throw new Error('bench: a loaded email was not found');
      };
      const loginOne = async () => {
        const { rows: found } = await pool.query('SELECT * FROM one.users WHERE email = $1', [someone()]);
        if (found.length !== 1) throw new Error('bench: a loaded email was not found');
      };
      const loginTwoReads = async () => {
        const { rows: ids } = await pool.query('SELECT id FROM one.users WHERE email = $1', [someone()]);
        const { rows: found } = await pool.query('SELECT * FROM one.users WHERE id = $1', [ids[0]?.id]);
        if (found.length !== 1) throw new Error('bench: a loaded email was not found');
      };
      // Cold: a new router's first login and first sign-up vs a new pool's.
      const coldRouter = await createRouter(config, routerOptions);
      const coldPool = createPool(servers[0]?.url as string, { max: 4, applicationName: 'bench one table' });
      let coldLogin: { routerMs: number; oneTableMs: number };
      let coldSignUp: { routerMs: number; oneTableMs: number };
      try {
        coldLogin = {
          routerMs: round(await timed(() => coldRouter.lookup('user_email', someone(), { fetch: true }))),
          oneTableMs: round(
            await timed(() => coldPool.query('SELECT * FROM one.users WHERE email = $1', [someone()])),
          ),
        };
        coldSignUp = {
          routerMs: round(
            await timed(() =>
              coldRouter.insert('users', { name: 'cold', email: 'cold@example.com' }, { key: 'cold' }),
            ),
          ),
          oneTableMs: round(
            await timed(() =>
              coldPool.query('INSERT INTO one.users (name, email) VALUES ($1, $2) RETURNING id', [
                'cold',
                'cold@example.com',
              ]),
            ),
          ),
        };
      } finally {
        await coldRouter.close();
        await coldPool.end();
      }
      // Warm-up: pools, catalogs, every shard's tables in the backends' caches.
      for (let i = 0; i < shards * 8; i++) {
        await loginLookup();
        await loginFetch();
        await loginOne();
        await loginTwoReads();
      }
      const lookupMs: number[] = [];
      const fetchMs: number[] = [];
      const oneMs: number[] = [];
      const twoMs: number[] = [];
      for (let done = 0; done < samples; done += BLOCK) {
        for (let i = 0; i < BLOCK; i++) lookupMs.push(await timed(loginLookup));
        for (let i = 0; i < BLOCK; i++) fetchMs.push(await timed(loginFetch));
        for (let i = 0; i < BLOCK; i++) oneMs.push(await timed(loginOne));
        for (let i = 0; i < BLOCK; i++) twoMs.push(await timed(loginTwoReads));
        progress('login', done + BLOCK, samples);
      }

      let fresh = rows;
      const entrySame: number[] = [];
      const entryOther: number[] = [];
      const signUpLookup = async () => {
        const n = fresh++;
        const name = `user${n}`;
        const started = performance.now();
        await router.insert('users', { name, email: email(n) }, { key: name });
        const ms = performance.now() - started;
        const rowServer = router.placement(router.shardFor(name)).server;
        const entryServer = router.placement(router.shardFor(email(n))).server;
        (rowServer === entryServer ? entrySame : entryOther).push(ms);
        return ms;
      };
      const signUpOne = () => {
        const n = fresh++;
        return timed(() =>
          pool.query('INSERT INTO one.users (name, email) VALUES ($1, $2) RETURNING id', [
            `user${n}`,
            email(n),
          ]),
        );
      };
      const signUpPlain = () => {
        const n = fresh++;
        return timed(() =>
          router.insert('plain_users', { name: `user${n}`, email: email(n) }, { key: `user${n}` }),
        );
      };
      for (let i = 0; i < 200; i++) {
        await signUpLookup();
        await signUpOne();
        await signUpPlain();
      }
      entrySame.length = 0;
      entryOther.length = 0;
      const upLookup: number[] = [];
      const upOne: number[] = [];
      const upPlain: number[] = [];
      for (let done = 0; done < samples; done += BLOCK) {
        for (let i = 0; i < BLOCK; i++) upLookup.push(await signUpLookup());
        for (let i = 0; i < BLOCK; i++) upOne.push(await signUpOne());
        for (let i = 0; i < BLOCK; i++) upPlain.push(await signUpPlain());
        progress('sign-up', done + BLOCK, samples);
      }
      const login = {
        lookupFetch: latency(fetchMs),
        lookupThenGet: latency(lookupMs),
        oneTable: latency(oneMs),
        twoReadsOneTable: latency(twoMs),
      };
      const signUp = {
        lookup: latency(upLookup),
        entrySameServer: latency(entrySame.length > 0 ? entrySame : [0]),
        entryOtherServer: latency(entryOther.length > 0 ? entryOther : [0]),
        oneTable: latency(upOne),
        routerNoLookup: latency(upPlain),
      };
      return {
        server: { version, embedded: true },
        machine: { cpus: cpus().length, node: process.version },
        settings: { rows, samples, shards, servers: 2 },
        login: {
          ...login,
          p50Ratio: round(login.lookupFetch.p50Ms / login.oneTable.p50Ms),
          p99Ratio: round(login.lookupFetch.p99Ms / login.oneTable.p99Ms),
          thenGetP50Ratio: round(login.lookupThenGet.p50Ms / login.oneTable.p50Ms),
          floorP50Ratio: round(login.twoReadsOneTable.p50Ms / login.oneTable.p50Ms),
          cold: coldLogin,
        },
        signUp: {
          ...signUp,
          p50Ratio: round(signUp.lookup.p50Ms / signUp.oneTable.p50Ms),
          p99Ratio: round(signUp.lookup.p99Ms / signUp.oneTable.p99Ms),
          p50RatioVsRouterNoLookup: round(signUp.lookup.p50Ms / signUp.routerNoLookup.p50Ms),
          cold: coldSignUp,
        },
        load: { before: round(loadBefore), after: round(loadavg()[0] as number) },
      };
    } finally {
      await router.close();
      await pool.end();
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

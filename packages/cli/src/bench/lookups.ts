import { cpus, loadavg } from 'node:os';
import { startEmbeddedServers } from '@shardflake/embedded';
import type pg from 'pg';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { createPool } from 'shardflake/internal/postgres/connect.js';
import { createRouter, type Router } from 'shardflake/internal/router/router.js';
import { percentile } from './stats.js';

/**
 * `bench lookups`: what a lookup costs, side by side in one run on two embedded servers, one client, operations of
 * the sides interleaved in blocks of 50 (so a slow moment of the machine hits every side):
 *
 * - login by email: `router.lookup('user_email', email, { fetch: true })` on a cluster of 64 shards, three ways —
 *   a router with its default owner cache (10,000 values, while 20,000 users are picked at random: about half the
 *   logins remembered), a router whose cache holds every user (warm: one read of the owner by its email, the
 *   target's figure), and one without the cache (two reads in sequence: the entry in the email's shard, then the
 *   owner's row, which the owner check returns) — and `router.lookup` then `router.get`; vs
 *   `SELECT * FROM users WHERE email = $1` on one table with a unique index, on one server, same rows; and two
 *   plain reads in sequence on that one table (email → id, then id → row), the floor of a lookup without the cache;
 * - sign-up: `router.insert` into the table with the unique lookup, placed beside its entry (`{ lookup }`: the row
 *   in the shard of the email's hash, row and entry in one local transaction, one round trip) and by its key (the
 *   default: the row in the shard of the name, the entry in the shard of the email's hash — on the other server
 *   half of the time, then a two-phase commit), vs a plain `INSERT … RETURNING id` into the one table (its unique
 *   index checked by PostgreSQL), and vs `router.insert` into a sharded table without a lookup.
 * Statements are unprepared on every side (the common path; the router prepares none), pools warm. `cold` times a
 * new router's first call against a new pool's first query (connections opened, the lookup's readiness read from
 * the catalog once), and that router's second login of the same email (its cache now holds it). Latencies in ms;
 * ratios are router / one table. The load average before and after is reported: on a shared machine, compare
 * runs only at similar loads.
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
    /** `lookup(…, { fetch: true })`, default router: the owner cache holds 10,000 of the users. */
    lookupFetch: Latency;
    /** The same with every user in the cache: one read (the target's figure). */
    lookupFetchWarm: Latency;
    /** The same without the cache: the entry, then the owner (two reads). */
    lookupFetchNoCache: Latency;
    /** `lookup` then `get`, default router. */
    lookupThenGet: Latency;
    oneTable: Latency;
    /** Two reads in sequence on the one table: what a lookup through its entry (entry, then row) costs at least. */
    twoReadsOneTable: Latency;
    /** lookupFetchWarm / oneTable: the target's figure (≤ 1.3). */
    warmP50Ratio: number;
    warmP99Ratio: number;
    /** lookupFetch / oneTable. */
    p50Ratio: number;
    p99Ratio: number;
    noCacheP50Ratio: number;
    thenGetP50Ratio: number;
    floorP50Ratio: number;
    cold: { routerMs: number; routerSecondMs: number; oneTableMs: number };
  };
  signUp: {
    /** `insert(…, { lookup })`: the row beside its entry, one round trip (the target's figure). */
    placed: Latency;
    /** `insert(…, { key })`: the default placement. */
    lookup: Latency;
    /** The default sign-ups, split by where the email's entry lived. */
    entrySameServer: Latency;
    entryOtherServer: Latency;
    oneTable: Latency;
    routerNoLookup: Latency;
    /** placed / oneTable: the target's figure (≤ 2). */
    placedP50Ratio: number;
    placedP99Ratio: number;
    p50Ratio: number;
    p99Ratio: number;
    p50RatioVsRouterNoLookup: number;
    cold: { routerMs: number; routerPlacedMs: number; oneTableMs: number };
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
    const closing: Router[] = [];
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
      // The three routers: the default one, one whose cache holds every user, one without the cache.
      const warmRouter = await createRouter(config, { ...routerOptions, lookupCacheSize: rows * 2 });
      const noCache = await createRouter(config, { ...routerOptions, lookupCacheSize: 0 });
      closing.push(warmRouter, noCache);
      const fetchWith = (r: Router) => async () => {
        const hit = await r.lookup('user_email', someone(), { fetch: true });
        if (!hit?.row) throw new Error('bench: a loaded email was not found');
      };
      const loginLookup = async () => {
        const hit = await router.lookup('user_email', someone());
        if (!hit) throw new Error('bench: a loaded email was not found');
        await router.get('users', hit.id);
      };
      const loginFetch = fetchWith(router);
      const loginWarm = fetchWith(warmRouter);
      const loginNoCache = fetchWith(noCache);
      const loginOne = async () => {
        const { rows: found } = await pool.query('SELECT * FROM one.users WHERE email = $1', [someone()]);
        if (found.length !== 1) throw new Error('bench: a loaded email was not found');
      };
      const loginTwoReads = async () => {
        const { rows: ids } = await pool.query('SELECT id FROM one.users WHERE email = $1', [someone()]);
        const { rows: found } = await pool.query('SELECT * FROM one.users WHERE id = $1', [ids[0]?.id]);
        if (found.length !== 1) throw new Error('bench: a loaded email was not found');
      };
      // Cold: a new router's first login (and its second, of the same email) and first sign-ups vs a new pool's.
      const coldRouter = await createRouter(config, routerOptions);
      const coldPool = createPool(servers[0]?.url as string, { max: 4, applicationName: 'bench one table' });
      let coldLogin: LookupsBenchResult['login']['cold'];
      let coldSignUp: LookupsBenchResult['signUp']['cold'];
      try {
        const first = someone();
        coldLogin = {
          routerMs: round(await timed(() => coldRouter.lookup('user_email', first, { fetch: true }))),
          routerSecondMs: round(await timed(() => coldRouter.lookup('user_email', first, { fetch: true }))),
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
          routerPlacedMs: round(
            await timed(() =>
              coldRouter.insert(
                'users',
                { name: 'cold2', email: 'cold2@example.com' },
                { lookup: 'user_email' },
              ),
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
      // Warm-up: pools, catalogs, every shard's tables in the backends' caches; the warm router's cache gets
      // every user.
      for (let i = 0; i < shards * 8; i++) {
        await loginLookup();
        await loginFetch();
        await loginNoCache();
        await loginOne();
        await loginTwoReads();
      }
      for (let i = 0; i < rows; i++)
        if (!(await warmRouter.lookup('user_email', email(i))))
          throw new Error('bench: a loaded email was not found');
      const lookupMs: number[] = [];
      const fetchMs: number[] = [];
      const warmMs: number[] = [];
      const noCacheMs: number[] = [];
      const oneMs: number[] = [];
      const twoMs: number[] = [];
      for (let done = 0; done < samples; done += BLOCK) {
        for (let i = 0; i < BLOCK; i++) lookupMs.push(await timed(loginLookup));
        for (let i = 0; i < BLOCK; i++) fetchMs.push(await timed(loginFetch));
        for (let i = 0; i < BLOCK; i++) warmMs.push(await timed(loginWarm));
        for (let i = 0; i < BLOCK; i++) noCacheMs.push(await timed(loginNoCache));
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
      const signUpPlaced = () => {
        const n = fresh++;
        return timed(() =>
          router.insert('users', { name: `user${n}`, email: email(n) }, { lookup: 'user_email' }),
        );
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
        await signUpPlaced();
        await signUpOne();
        await signUpPlain();
      }
      entrySame.length = 0;
      entryOther.length = 0;
      const upLookup: number[] = [];
      const upPlaced: number[] = [];
      const upOne: number[] = [];
      const upPlain: number[] = [];
      for (let done = 0; done < samples; done += BLOCK) {
        for (let i = 0; i < BLOCK; i++) upPlaced.push(await signUpPlaced());
        for (let i = 0; i < BLOCK; i++) upLookup.push(await signUpLookup());
        for (let i = 0; i < BLOCK; i++) upOne.push(await signUpOne());
        for (let i = 0; i < BLOCK; i++) upPlain.push(await signUpPlain());
        progress('sign-up', done + BLOCK, samples);
      }
      const login = {
        lookupFetch: latency(fetchMs),
        lookupFetchWarm: latency(warmMs),
        lookupFetchNoCache: latency(noCacheMs),
        lookupThenGet: latency(lookupMs),
        oneTable: latency(oneMs),
        twoReadsOneTable: latency(twoMs),
      };
      const signUp = {
        placed: latency(upPlaced),
        lookup: latency(upLookup),
        entrySameServer: latency(entrySame.length > 0 ? entrySame : [0]),
        entryOtherServer: latency(entryOther.length > 0 ? entryOther : [0]),
        oneTable: latency(upOne),
        routerNoLookup: latency(upPlain),
      };
      const ratio = (x: number, y: number) => round(x / y);
      return {
        server: { version, embedded: true },
        machine: { cpus: cpus().length, node: process.version },
        settings: { rows, samples, shards, servers: 2 },
        login: {
          ...login,
          warmP50Ratio: ratio(login.lookupFetchWarm.p50Ms, login.oneTable.p50Ms),
          warmP99Ratio: ratio(login.lookupFetchWarm.p99Ms, login.oneTable.p99Ms),
          p50Ratio: ratio(login.lookupFetch.p50Ms, login.oneTable.p50Ms),
          p99Ratio: ratio(login.lookupFetch.p99Ms, login.oneTable.p99Ms),
          noCacheP50Ratio: ratio(login.lookupFetchNoCache.p50Ms, login.oneTable.p50Ms),
          thenGetP50Ratio: ratio(login.lookupThenGet.p50Ms, login.oneTable.p50Ms),
          floorP50Ratio: ratio(login.twoReadsOneTable.p50Ms, login.oneTable.p50Ms),
          cold: coldLogin,
        },
        signUp: {
          ...signUp,
          placedP50Ratio: ratio(signUp.placed.p50Ms, signUp.oneTable.p50Ms),
          placedP99Ratio: ratio(signUp.placed.p99Ms, signUp.oneTable.p99Ms),
          p50Ratio: ratio(signUp.lookup.p50Ms, signUp.oneTable.p50Ms),
          p99Ratio: ratio(signUp.lookup.p99Ms, signUp.oneTable.p99Ms),
          p50RatioVsRouterNoLookup: ratio(signUp.lookup.p50Ms, signUp.routerNoLookup.p50Ms),
          cold: coldSignUp,
        },
        load: { before: round(loadBefore), after: round(loadavg()[0] as number) },
      };
    } finally {
      await Promise.all([router, ...closing].map((r) => r.close()));
      await pool.end();
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

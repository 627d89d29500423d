import { readFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import type pg from 'pg';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { migrateCluster } from 'shardflake/internal/admin/migrate.js';
import {
  readPlacement,
  readShardChanges,
  readShardMap,
  setShardsState,
} from 'shardflake/internal/catalog/shards.js';
import type { ShardflakeId } from 'shardflake/internal/ids/id.js';
import { rebalanceCluster } from 'shardflake/internal/move/rebalance.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { createRouter, type Router, type RouterOptions } from 'shardflake/internal/router/router.js';
import { CATALOG_APPLICATION_NAME } from 'shardflake/internal/routing/catalog-connection.js';
import { DEFAULT_SHARDS_PER_CONNECTION } from 'shardflake/internal/topology/warm-shards.js';
import { COLUMNS, fillStatements, ordersConfig, TABLE } from './sql-across.js';
import { percentile } from './stats.js';

/**
 * `bench scale`: what one cluster costs as its logical shards grow (256 → 8,192 by default on 4 embedded servers),
 * each shard count on fresh servers, every figure a ratio against a baseline measured in the same run:
 *
 * - init: `initCluster` time per shard.
 * - router: the process's RSS after `createRouter` minus before (with `--expose-gc`, after a collection each
 *   side), and createRouter's time.
 * - router.sql over every shard — a grouped aggregate and an `ORDER BY … LIMIT` — against the same rows in one
 *   plain table on the first server: the query's first call on a new router (its connections opened by the call;
 *   the parser loaded before, as it is once per process) against the one table's first query on a new connection;
 *   then the p50 of `repeat` calls each, alternating. Answers are checked equal to the one table's, or the run stops.
 *   Then prepared (`{ prepare: true }` against a named statement) after 30 calls each, p50 of `repeat`.
 * - backends: the largest private memory (RssAnon, from /proc/<pid>/status: the machine is local) of any of the
 *   router's backends on any server after those calls, and the largest VmRSS (which also counts the shared buffers
 *   a backend touched).
 * - single rows: `router.insert` by key and `router.get` by id on 16 hot shards vs on random shards of all of them,
 *   interleaved in blocks of 50, p50 of each and the ratio random / hot.
 *
 * - passes over every shard (issue 33 item 2): for each `passBounds` value, a new router (pools of 10) with that
 *   `shardsPerConnection` inserts a row into every shard and reads it back, `passRounds` times (shards in random
 *   order, 10 at a time); then the largest private memory of its backends, how many connections it opened
 *   (pg_stat_database.sessions), the p50 of the first pass (first touches) and of the last, and the p50 of inserts
 *   on 16 hot shards afterwards (the same router, 10 at a time).
 *
 * - a migration under a writer (issue 33 item 3): one router inserting on random shards, one row at a time, alone
 *   for `writerAloneSeconds`, then while `migrateCluster` builds an index CONCURRENTLY on every shard's orders:
 *   its throughput, p50, p99 and longest insert in each, and the migration's time.
 *
 * - a map version (issue 33 item 4): `REFRESH_ROUTERS` routers listening to the catalog, then a version that changes
 *   one shard (its state set again, as a move's steps do): the shard rows each router read for it (its `map` event)
 *   and how long until every router routed by it; the catalog connections the routers hold; and on the catalog,
 *   the p50 of reading what changed since the version before against reading the whole map.
 * - a rebalance under a writer (issue 33 items 3 and 6): one more server joins, `rebalanceCluster` moves a fair
 *   share of the shards to it as sets while the writer inserts on random shards (alone first, as for the
 *   migration): seconds per shard moved, the longest cutover pause, the sets' steps, and the writer's figures.
 *
 * The bench does not create the rows through the router: each server fills its shards with INSERT … SELECT
 * generate_series (row g in shard g mod shards), as the one table is filled, so loading 409,600 rows takes seconds.
 */
export interface ScaleBenchOptions {
  /** Logical shard counts, each run on fresh servers (default 256 and 1,024). */
  shards?: readonly number[];
  /** Embedded servers (default 4). */
  servers?: number;
  /** Rows in all, spread over the shards (default 409,600: 50 per shard at 8,192). */
  rows?: number;
  /** Timed router.sql calls per query and side (default 5). */
  repeat?: number;
  /** Single-row operations per kind and side (default 400). */
  samples?: number;
  /** router.sql's `sqlShardsPerStatement` (default: the router's, 64). */
  shardsPerStatement?: number;
  /** `shardsPerConnection` of each pass over every shard (default 0, the router's default (200) and 80; empty: no pass). */
  passBounds?: readonly number[];
  /** Passes over every shard per bound, on one router (default 3). */
  passRounds?: number;
  /** Only the passes over every shard: no rows loaded, no router.sql, no hot/random single rows. */
  passOnly?: boolean;
  /** A migration (an index built CONCURRENTLY on every shard) under one writer (default true). */
  migrate?: boolean;
  /** Seconds the writer runs alone before the migration (default 10). */
  writerAloneSeconds?: number;
  /** The migration's `parallelBuilds`: servers building an index at once (default: migrateCluster's, all). */
  migrateParallelBuilds?: number;
  /** The migration's `buildShare`: the share of each server's time its builds may take (default: 1). */
  migrateBuildShare?: number;
  /** The cost of a map version to routers and the catalog (default true). */
  refresh?: boolean;
  /** A rebalance onto one more server under a writer (default true). */
  rebalance?: boolean;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface SqlFigures {
  /** The query's first call: router.sql (pools and parser warm) vs a new connection on the one table. */
  firstMs: number;
  oneTableFirstMs: number;
  /**
   * The calls right after the first, default settings on both sides: router.sql as it comes (sqlPrepare 'auto':
   * named pieces from the second call, custom plans for their first five runs on a connection) against the one
   * table's unnamed statement.
   */
  p50Ms: number;
  oneTableP50Ms: number;
  /** p50Ms / oneTableP50Ms. */
  ratio: number;
  /** The same once warm (after 30 calls): router.sql as it comes against the one table's unnamed statement. */
  warm: Side;
  /** `router.sql(…, { prepare: false })` (a pooler that loses named statements) against the unnamed statement. */
  unprepared: Side;
  /** `router.sql(…, { prepare: true })` against a named statement on the one table, both warm. */
  prepared: Side;
}

/** router.sql's p50 against the one table's, and their ratio. */
export interface Side {
  p50Ms: number;
  oneTableP50Ms: number;
  ratio: number;
}

/** One writer's inserts on random shards: alone, then during some work (a migration, a rebalance). */
export interface WriterRun {
  /** The work's wall time. */
  seconds: number;
  alone: WriterFigures;
  during: WriterFigures;
  /** during.perSecond / alone.perSecond. */
  throughputRatio: number;
}

/** The writer while `cluster migrate` builds an index (CREATE INDEX CONCURRENTLY) on every shard's orders. */
export type MigrateFigures = WriterRun;

/** What one map version costs: routers' reads, their catalog connections, and the catalog's reads. */
export interface RefreshFigures {
  routers: number;
  /** Connections the routers hold to the catalog for the map (pg_stat_activity), all routers together. */
  catalogConnections: number;
  /** For a version that changed one shard: the most shard rows any router read, and how (`changes` or `full`). */
  shardRowsRead: number;
  read: 'changes' | 'full' | 'none';
  /** From the version's commit until every router routed by it. */
  propagationMs: number;
  /** On the catalog, p50 of REFRESH_SAMPLES each: the changes since the version before (one shard); the whole map. */
  changesP50Ms: number;
  fullP50Ms: number;
}

/** A rebalance onto one more server, as sets, under a writer on random shards. */
export interface RebalanceFigures {
  moved: number;
  sets: number;
  secondsPerShard: number;
  /** The longest cutover pause of any moved shard. */
  longestPauseMs: number;
  /** Milliseconds per step (check, prepare, copy, cutover, finish, …), summed over the sets. */
  steps: Record<string, number>;
  writer: WriterRun;
}

export interface WriterFigures {
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** router.sql against one table, the backends after it, single rows on hot and random shards. */
export interface AcrossFigures {
  aggregate: SqlFigures;
  orderLimit: SqlFigures;
  /** After the router.sql calls: the router's backends, largest on any server. */
  backendMaxRssAnonMb: number | null;
  backendMaxVmRssMb: number | null;
  backends: number;
  insert: { hotP50Ms: number; randomP50Ms: number; ratio: number };
  get: { hotP50Ms: number; randomP50Ms: number; ratio: number };
}

/** A pass over every shard by a new router whose connections have a given `shardsPerConnection`. */
export interface PassFigures {
  shardsPerConnection: number;
  /** Passes over every shard, on the same router. */
  rounds: number;
  seconds: number;
  /** p50 of the first pass's inserts and gets: each the router's first touch of its shard. */
  insertP50Ms: number;
  getP50Ms: number;
  /** p50 of the last pass's inserts. */
  lastInsertP50Ms: number;
  /** p50 of inserts on 16 hot shards after the passes, on the same router, as many at a time. */
  hotInsertP50Ms: number;
  /** insertP50Ms / hotInsertP50Ms. */
  coldRatio: number;
  /** The largest private memory of the router's backends after the pass, on any server. */
  backendMaxRssAnonMb: number | null;
  backends: number;
  /** Connections the servers accepted during the pass (pg_stat_database.sessions), summed. */
  connectionsOpened: number;
}

export interface ScaleRow {
  shards: number;
  initMsPerShard: number;
  createRouterMs: number;
  routerRssMb: number;
  /** router.sql, its backends and single rows: left out with `passOnly`. */
  across?: AcrossFigures;
  passes: PassFigures[];
  /** Left out with `migrate: false`. */
  migrate?: MigrateFigures;
  /** Left out with `refresh: false`. */
  refresh?: RefreshFigures;
  /** Left out with `rebalance: false`. */
  rebalance?: RebalanceFigures;
  /** Wall time of this shard count, servers' start to stop. */
  seconds: number;
}

export interface ScaleBenchResult {
  servers: number;
  rows: number;
  repeat: number;
  samples: number;
  /** router.sql's sqlShardsPerStatement when set; left out, the router's default. */
  shardsPerStatement?: number;
  queries: { aggregate: string; orderLimit: string };
  results: ScaleRow[];
  /** `shardsPerConnection` of the passes over every shard, in their order. */
  passBounds: number[];
  passOnly: boolean;
  passRounds: number;
  migrate: boolean;
  writerAloneSeconds: number;
  migrateParallelBuilds?: number;
  migrateBuildShare?: number;
  refresh: boolean;
  rebalance: boolean;
  /**
   * The targets of issue 33 at the largest shard count measured (passBackendMb: after a pass over every shard;
   * the writer during a migration: at least migrateThroughput of its throughput alone, p99 at most migrateP99Ms).
   */
  targets: {
    ratio: number;
    firstMs: number;
    backendMb: number;
    passBackendMb: number;
    migrateThroughput: number;
    migrateP99Ms: number;
    rebalanceSecondsPerShard: number;
  };
  load: { before: number; after: number };
  machine: { cpus: number; node: string };
}

export const AGGREGATE =
  'SELECT country, count(*) AS orders, sum(amount) AS amount, avg(price) AS avg_price, max(amount) AS largest FROM orders WHERE amount > $1 GROUP BY country ORDER BY orders DESC, country';
/** Rows equal in (amount, price, country) are equal in every selected column, so the answer is one list. */
export const ORDER_LIMIT =
  'SELECT country, amount, price FROM orders WHERE amount > $1 ORDER BY amount DESC, price, country LIMIT 20';
const VALUES = [100];
/** Shard inserts per statement while loading: one transaction locks each table it fills. */
const LOAD_BATCH = 256;
const HOT_SHARDS = 16;
const PREPARED_WARM_CALLS = 30;
const BLOCK = 50;
/** Concurrent callers of a pass over every shard: as many as the router's pool holds per server. */
const PASS_WORKERS = 10;
const PASS_HOT_INSERTS = 400;
/** Routers listening while a map version is measured, and catalog reads timed per kind. */
const REFRESH_ROUTERS = 10;
const REFRESH_SAMPLES = 20;
/** The migration of the run (and so of the config the rebalance runs with once it ran). */
const MIGRATION = {
  version: 1,
  name: 'orders by country',
  sql: 'CREATE INDEX CONCURRENTLY orders_country ON orders (country, amount)',
};

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;
const mb = (bytes: number) => round(bytes / 2 ** 20, 1);
const show = (rows: unknown) => JSON.stringify(rows, (_k, v) => (typeof v === 'bigint' ? String(v) : v));

async function timed<T>(call: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const at = performance.now();
  const value = await call();
  return { ms: performance.now() - at, value };
}

function rss(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().rss;
}

/** A process's memory from /proc, in kB: VmRSS (all resident pages) and RssAnon (its private ones). */
async function procMemory(pid: number): Promise<{ vmRss: number; rssAnon: number } | null> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const field = (name: string) =>
    Number(new RegExp(`${name}:\\s+(\\d+)\\s+kB`).exec(status)?.[1] ?? Number.NaN);
  const [vmRss, rssAnon] = [field('VmRSS'), field('RssAnon')];
  return Number.isNaN(vmRss) || Number.isNaN(rssAnon) ? null : { vmRss, rssAnon };
}

/** Fills every shard (row g in shard g mod shards), LOAD_BATCH shards per statement, servers in parallel. */
async function load(router: Router, servers: EmbeddedServer[], shards: number, rows: number): Promise<void> {
  const byServer = fillStatements((shard) => router.placement(shard), shards, rows);
  await Promise.all(
    servers.map(async (s) => {
      const client = await connect(s.url);
      try {
        const list = byServer.get(s.name) ?? [];
        for (let i = 0; i < list.length; i += LOAD_BATCH)
          await client.query(list.slice(i, i + LOAD_BATCH).join(';\n'));
        await client.query('VACUUM ANALYZE');
      } finally {
        await client.end();
      }
    }),
  );
}

/**
 * A query's first call on each side, then `repeat` calls each way, alternating sides: as it comes, unprepared,
 * as it comes once warm, and prepared (see SqlFigures). The first answers must be the same.
 */
async function compareSql(router: Router, url: string, text: string, repeat: number): Promise<SqlFigures> {
  const oneText = text.replace(' FROM orders ', ' FROM one_table.orders ');
  const first = await timed(() => router.sql(text, VALUES));
  const fresh = await connect(url);
  let oneFirst: { ms: number; value: pg.QueryResult };
  try {
    oneFirst = await timed(() => fresh.query(oneText, VALUES));
  } finally {
    await fresh.end();
  }
  if (show(first.value.rows) !== show(oneFirst.value.rows))
    throw new Error(`bench scale: router.sql and the one table answered differently: ${text}`);
  const one = await connect(url);
  const named = { name: 'bench_scale_one', text: oneText, values: VALUES };
  const side = async (routerCall: () => Promise<unknown>, oneCall: () => Promise<unknown>): Promise<Side> => {
    const routerMs: number[] = [];
    const oneMs: number[] = [];
    for (let i = 0; i < repeat; i++) {
      routerMs.push((await timed(routerCall)).ms);
      oneMs.push((await timed(oneCall)).ms);
    }
    const [p50, oneP50] = [percentile(routerMs, 50), percentile(oneMs, 50)];
    return { p50Ms: round(p50, 1), oneTableP50Ms: round(oneP50, 1), ratio: round(p50 / oneP50) };
  };
  try {
    const asItComes = () => router.sql(text, VALUES);
    const oneUnnamed = () => one.query(oneText, VALUES);
    const calls = await side(asItComes, oneUnnamed);
    const unprepared = await side(() => router.sql(text, VALUES, { prepare: false }), oneUnnamed);
    // Warm: each piece a named statement per connection, planned generically after PostgreSQL's fifth run on
    // that connection; a piece reaches a given connection about once in sqlConnectionsPerServer calls.
    for (let i = 0; i < PREPARED_WARM_CALLS; i++) {
      await router.sql(text, VALUES);
      await one.query(named);
    }
    const warm = await side(asItComes, oneUnnamed);
    const prepared = await side(
      () => router.sql(text, VALUES, { prepare: true }),
      () => one.query(named),
    );
    return {
      firstMs: round(first.ms, 1),
      oneTableFirstMs: round(oneFirst.ms, 1),
      ...calls,
      warm,
      unprepared,
      prepared,
    };
  } finally {
    await one.end();
  }
}

/** The largest private and resident memory of the router's backends (application_name) on any server. */
async function backendMemory(
  servers: EmbeddedServer[],
): Promise<{ rssAnonMb: number | null; vmRssMb: number | null; backends: number }> {
  let rssAnon: number | null = null;
  let vmRss: number | null = null;
  let backends = 0;
  for (const s of servers) {
    const client = await connect(s.url);
    try {
      const { rows } = await client.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'shardflake router' AND backend_type = 'client backend'",
      );
      for (const { pid } of rows) {
        const m = await procMemory(pid);
        backends++;
        if (!m) continue;
        rssAnon = Math.max(rssAnon ?? 0, m.rssAnon);
        vmRss = Math.max(vmRss ?? 0, m.vmRss);
      }
    } finally {
      await client.end();
    }
  }
  return {
    rssAnonMb: rssAnon === null ? null : mb(rssAnon * 1024),
    vmRssMb: vmRss === null ? null : mb(vmRss * 1024),
    backends,
  };
}

/** Inserts by key and gets by id on hot shards and on random ones, interleaved in blocks; p50 of each. */
async function singleRows(
  router: Router,
  shards: number,
  samples: number,
): Promise<Pick<AcrossFigures, 'insert' | 'get'>> {
  const hot = Math.min(HOT_SHARDS, shards);
  const times = {
    hotInsert: [] as number[],
    randomInsert: [] as number[],
    hotGet: [] as number[],
    randomGet: [] as number[],
  };
  const ids = { hot: [] as ShardflakeId[], random: [] as ShardflakeId[] };
  const row = { country: 'fr', amount: 1, price: '1.00' };
  // A key's shard is the key modulo the shard count (routing/shard-key.ts): keys below `hot` stay on hot shards.
  const key = (side: 'hot' | 'random') => Math.floor(Math.random() * (side === 'hot' ? hot : shards));
  for (let done = 0; done < samples; done += BLOCK) {
    for (const side of ['hot', 'random'] as const) {
      for (let i = 0; i < Math.min(BLOCK, samples - done); i++) {
        const { ms, value } = await timed(() => router.insert('orders', row, { key: key(side) }));
        times[side === 'hot' ? 'hotInsert' : 'randomInsert'].push(ms);
        ids[side].push(value);
      }
    }
  }
  for (let done = 0; done < samples; done += BLOCK) {
    for (const side of ['hot', 'random'] as const) {
      for (let i = done; i < Math.min(done + BLOCK, samples); i++) {
        const id = ids[side][i] as ShardflakeId;
        times[side === 'hot' ? 'hotGet' : 'randomGet'].push((await timed(() => router.get('orders', id))).ms);
      }
    }
  }
  const pair = (h: number[], r: number[]) => {
    const [hotP50, randomP50] = [percentile(h, 50), percentile(r, 50)];
    return { hotP50Ms: round(hotP50, 3), randomP50Ms: round(randomP50, 3), ratio: round(randomP50 / hotP50) };
  };
  return { insert: pair(times.hotInsert, times.randomInsert), get: pair(times.hotGet, times.randomGet) };
}

/** Connections each server has accepted since it started (pg_stat_database.sessions), summed. */
async function sessionsOpened(servers: EmbeddedServer[]): Promise<number> {
  let total = 0;
  for (const s of servers) {
    const client = await connect(s.url);
    try {
      const { rows } = await client.query<{ n: string }>(
        'SELECT sessions::text AS n FROM pg_stat_database WHERE datname = current_database()',
      );
      total += Number(rows[0]?.n ?? 0);
    } finally {
      await client.end();
    }
  }
  // This function's own connections count too: one per server.
  return total - servers.length;
}

/** Runs `work(shard)` for every shard in random order, PASS_WORKERS at a time. */
async function everyShard(shards: number, work: (shard: number) => Promise<void>): Promise<void> {
  const order = [...Array(shards).keys()];
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j] as number, order[i] as number];
  }
  let next = 0;
  await Promise.all(
    Array.from({ length: PASS_WORKERS }, async () => {
      while (next < order.length) await work(order[next++] as number);
    }),
  );
}

/**
 * A new router with `shardsPerConnection: bound` (pools of 10) inserts a row into every shard and reads it back,
 * `rounds` times (shards in random order each round, PASS_WORKERS at a time), then inserts on hot shards as many at
 * a time; what its backends hold after.
 */
async function passOverEveryShard(
  config: ReturnType<typeof ordersConfig>,
  servers: EmbeddedServer[],
  shards: number,
  bound: number,
  rounds: number,
  routerOptions: RouterOptions,
  progress: (phase: string, done: number, total: number) => void,
): Promise<PassFigures> {
  const router = await createRouter(config, { ...routerOptions, poolSize: 10, shardsPerConnection: bound });
  try {
    const opened = await sessionsOpened(servers);
    const row = { country: 'fr', amount: 1, price: '1.00' };
    const perRound: { inserts: number[]; gets: number[] }[] = [];
    const at = performance.now();
    for (let round = 0; round < rounds; round++) {
      const times = { inserts: [] as number[], gets: [] as number[] };
      perRound.push(times);
      await everyShard(shards, async (shard) => {
        const made = await timed(() => router.insert('orders', row, { key: shard }));
        times.inserts.push(made.ms);
        times.gets.push((await timed(() => router.get('orders', made.value))).ms);
        if (times.inserts.length % 256 === 0)
          progress(`${shards}: pass ${round + 1}/${rounds}, bound ${bound}`, times.inserts.length, shards);
      });
    }
    const seconds = (performance.now() - at) / 1000;
    const accepted = (await sessionsOpened(servers)) - opened;
    const memory = await backendMemory(servers);
    // Hot inserts with as many callers at a time as the pass had, so that their p50 is comparable.
    const hot: number[] = [];
    await everyShard(PASS_HOT_INSERTS, async (i) => {
      hot.push((await timed(() => router.insert('orders', row, { key: i % HOT_SHARDS }))).ms);
    });
    const [first, last] = [perRound[0], perRound[perRound.length - 1]] as {
      inserts: number[];
      gets: number[];
    }[];
    const [insertP50, hotP50] = [percentile(first?.inserts ?? [], 50), percentile(hot, 50)];
    return {
      shardsPerConnection: bound,
      rounds,
      seconds: round(seconds, 1),
      insertP50Ms: round(insertP50, 3),
      getP50Ms: round(percentile(first?.gets ?? [], 50), 3),
      lastInsertP50Ms: round(percentile(last?.inserts ?? [], 50), 3),
      hotInsertP50Ms: round(hotP50, 3),
      coldRatio: round(insertP50 / hotP50),
      backendMaxRssAnonMb: memory.rssAnonMb,
      backends: memory.backends,
      connectionsOpened: accepted,
    };
  } finally {
    await router.close();
  }
}

/** A writer's figures from its insert times over `seconds`. */
function writerFigures(times: number[], seconds: number): WriterFigures {
  return {
    perSecond: round(times.length / seconds, 1),
    p50Ms: round(percentile(times, 50), 2),
    p99Ms: round(percentile(times, 99), 1),
    maxMs: round(Math.max(...times), 1),
  };
}

/**
 * One writer inserting on random shards, one row at a time, on a router listening to the catalog: alone for
 * `aloneSeconds`, then while `work` runs.
 */
async function writerDuring(
  config: ReturnType<typeof ordersConfig>,
  shards: number,
  aloneSeconds: number,
  routerOptions: RouterOptions,
  progress: (phase: string, done: number, total: number) => void,
  phase: string,
  work: () => Promise<unknown>,
): Promise<WriterRun> {
  const router = await createRouter(config, { ...routerOptions, listen: true });
  try {
    const row = { country: 'fr', amount: 1, price: '1.00' };
    const write = async (until: () => boolean): Promise<number[]> => {
      const times: number[] = [];
      while (!until()) {
        const key = Math.floor(Math.random() * shards);
        times.push((await timed(() => router.insert('orders', row, { key }))).ms);
      }
      return times;
    };
    progress(`${shards}: writer alone`, 0, 1);
    const aloneEnd = performance.now() + aloneSeconds * 1000;
    const alone = await write(() => performance.now() >= aloneEnd);
    progress(`${shards}: writer alone`, 1, 1);
    let done = false;
    const at = performance.now();
    progress(`${shards}: ${phase}`, 0, 1);
    const [during] = await Promise.all([
      write(() => done),
      work().finally(() => {
        done = true;
      }),
    ]);
    const seconds = (performance.now() - at) / 1000;
    const [aloneFigures, duringFigures] = [
      writerFigures(alone, aloneSeconds),
      writerFigures(during, seconds),
    ];
    return {
      seconds: round(seconds, 1),
      alone: aloneFigures,
      during: duringFigures,
      throughputRatio: round(duringFigures.perSecond / aloneFigures.perSecond),
    };
  } finally {
    await router.close();
  }
}

/** The writer while `migrateCluster` builds an index CONCURRENTLY on every shard's orders (MIGRATION). */
function migrateWithWriter(
  servers: EmbeddedServer[],
  shards: number,
  aloneSeconds: number,
  parallelBuilds: number | undefined,
  buildShare: number | undefined,
  routerOptions: RouterOptions,
  progress: (phase: string, done: number, total: number) => void,
): Promise<MigrateFigures> {
  const config = ordersConfig(servers, shards, 'bench scale', { migrations: [MIGRATION] });
  return writerDuring(config, shards, aloneSeconds, routerOptions, progress, 'migrate', () =>
    migrateCluster(config, {
      onProgress: (d, n) => progress(`${shards}: migrate`, d, n),
      ...(parallelBuilds === undefined ? {} : { parallelBuilds }),
      ...(buildShare === undefined ? {} : { buildShare }),
    }),
  );
}

/**
 * REFRESH_ROUTERS routers listening to the catalog; a version that changes one shard (its state set again, under a
 * new version, as a move's steps do); what the routers read for it and when they had it; then the catalog's two
 * reads, timed on one connection.
 */
async function mapVersionCost(
  config: ReturnType<typeof ordersConfig>,
  catalogUrl: string,
  shards: number,
  routerOptions: RouterOptions,
): Promise<RefreshFigures> {
  const reads = new Map<number, { read: 'changes' | 'full'; shardRows: number; at: number }>();
  const routers: Router[] = [];
  const catalog = await connect(catalogUrl);
  try {
    for (let i = 0; i < REFRESH_ROUTERS; i++) {
      routers.push(
        await createRouter(config, {
          ...routerOptions,
          listen: true,
          onEvent: (event) => {
            if (event.type === 'map' && event.version > 0n && event.previous > 0n)
              reads.set(i, { read: event.read, shardRows: event.shardRows, at: performance.now() });
          },
        }),
      );
    }
    // createRouter resolves with the map read and the LISTEN in place (routing/map.ts); that first read is not counted.
    const { rows } = await catalog.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
      [CATALOG_APPLICATION_NAME],
    );
    const shard = Math.floor(shards / 2);
    const state = (await readPlacement(catalog, shard)).state;
    const committed = performance.now();
    await catalog.query('BEGIN');
    const version = await setShardsState(catalog, [shard], state);
    await catalog.query('COMMIT');
    const deadline = committed + 30_000;
    while (reads.size < routers.length && performance.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 2));
    const seen = [...reads.values()];
    const changesMs: number[] = [];
    const fullMs: number[] = [];
    for (let i = 0; i < REFRESH_SAMPLES; i++) {
      changesMs.push((await timed(() => readShardChanges(catalog, version - 1n))).ms);
      fullMs.push((await timed(() => readShardMap(catalog))).ms);
    }
    return {
      routers: routers.length,
      catalogConnections: rows[0]?.n ?? 0,
      shardRowsRead: Math.max(0, ...seen.map((x) => x.shardRows)),
      read: seen.some((x) => x.read === 'full') ? 'full' : seen.length > 0 ? 'changes' : 'none',
      propagationMs: round(Math.max(0, ...seen.map((x) => x.at - committed)), 1),
      changesP50Ms: round(percentile(changesMs, 50), 2),
      fullP50Ms: round(percentile(fullMs, 50), 2),
    };
  } finally {
    await Promise.all(routers.map((r) => r.close()));
    await catalog.end();
  }
}

/** One more server joins; a rebalance moves a fair share of the shards to it as sets, under the writer. */
async function rebalanceWithWriter(
  servers: EmbeddedServer[],
  shards: number,
  migrated: boolean,
  aloneSeconds: number,
  routerOptions: RouterOptions,
  progress: (phase: string, done: number, total: number) => void,
): Promise<RebalanceFigures> {
  const config = ordersConfig(servers, shards, 'bench scale', migrated ? { migrations: [MIGRATION] } : {});
  let moved: Awaited<ReturnType<typeof rebalanceCluster>>['results'] = [];
  const writer = await writerDuring(
    config,
    shards,
    aloneSeconds,
    routerOptions,
    progress,
    'rebalance',
    async () => {
      moved = (
        await rebalanceCluster(config, { onProgress: (d, n) => progress(`${shards}: rebalance`, d, n) })
      ).results;
    },
  );
  const sets = [...new Map(moved.map((r) => [r.batchId, r.setSteps ?? {}])).values()];
  const steps: Record<string, number> = {};
  for (const set of sets)
    for (const [step, ms] of Object.entries(set)) steps[step] = round((steps[step] ?? 0) + ms, 0);
  return {
    moved: moved.length,
    sets: sets.length,
    secondsPerShard: moved.length > 0 ? round(writer.seconds / moved.length, 4) : 0,
    longestPauseMs: round(Math.max(0, ...moved.map((r) => r.pauseMs ?? 0)), 1),
    steps,
    writer,
  };
}

/** Loads the rows, then router.sql against one table, the backends after it, and single rows. */
async function acrossShards(
  router: Router,
  servers: EmbeddedServer[],
  shards: number,
  o: Required<Pick<ScaleBenchOptions, 'rows' | 'repeat' | 'samples'>>,
  progress: (phase: string, done: number, total: number) => void,
): Promise<AcrossFigures> {
  progress(`${shards}: load`, 0, 1);
  await load(router, servers, shards, o.rows);
  const url = (servers[0] as EmbeddedServer).url;
  const one = await connect(url);
  try {
    await one.query('CREATE SCHEMA one_table');
    await one.query(`SET search_path TO one_table`);
    await one.query(TABLE.replace(' DEFAULT next_id()', ''));
    await one.query(`INSERT INTO orders SELECT g, ${COLUMNS} FROM generate_series(0, ${o.rows - 1}) AS g`);
    await one.query('VACUUM ANALYZE orders');
  } finally {
    await one.end();
  }
  progress(`${shards}: load`, 1, 1);
  // The parser loads on the process's first router.sql (≈ 1 s); a refused query loads it and sends nothing.
  await router.sql('SELECT now() FROM orders').catch(() => {});
  progress(`${shards}: router.sql`, 0, 2);
  const aggregate = await compareSql(router, url, AGGREGATE, o.repeat);
  progress(`${shards}: router.sql`, 1, 2);
  const orderLimit = await compareSql(router, url, ORDER_LIMIT, o.repeat);
  progress(`${shards}: router.sql`, 2, 2);
  const memory = await backendMemory(servers);
  progress(`${shards}: single rows`, 0, 1);
  const rowsFigures = await singleRows(router, shards, o.samples);
  progress(`${shards}: single rows`, 1, 1);
  return {
    aggregate,
    orderLimit,
    backendMaxRssAnonMb: memory.rssAnonMb,
    backendMaxVmRssMb: memory.vmRssMb,
    backends: memory.backends,
    ...rowsFigures,
  };
}

async function runOne(
  shards: number,
  o: Required<
    Omit<
      ScaleBenchOptions,
      'shards' | 'shardsPerStatement' | 'migrateParallelBuilds' | 'migrateBuildShare' | 'onProgress'
    >
  > &
    Pick<ScaleBenchOptions, 'migrateParallelBuilds' | 'migrateBuildShare'>,
  routerOptions: RouterOptions,
  progress: (phase: string, done: number, total: number) => void,
): Promise<ScaleRow> {
  // One more server when a rebalance runs: it joins the config only for the rebalance.
  const all = await startEmbeddedServers(o.servers + (o.rebalance ? 1 : 0), {
    settings: { autovacuum: 'off' },
  });
  const servers = all.slice(0, o.servers);
  try {
    const config = ordersConfig(servers, shards, 'bench scale');
    const init = await timed(() =>
      initCluster(config, { onProgress: (d, n) => progress(`${shards}: init`, d, n) }),
    );
    const before = rss();
    const made = await timed(() => createRouter(config, routerOptions));
    const router = made.value;
    const routerRss = rss() - before;
    let across: AcrossFigures | undefined;
    try {
      if (!o.passOnly) across = await acrossShards(router, servers, shards, o, progress);
    } finally {
      await router.close();
    }
    const passes: PassFigures[] = [];
    for (const bound of o.passBounds)
      passes.push(
        await passOverEveryShard(config, servers, shards, bound, o.passRounds, routerOptions, progress),
      );
    const migrate = o.migrate
      ? await migrateWithWriter(
          servers,
          shards,
          o.writerAloneSeconds,
          o.migrateParallelBuilds,
          o.migrateBuildShare,
          routerOptions,
          progress,
        )
      : undefined;
    if (o.refresh) progress(`${shards}: map version`, 0, 1);
    const refresh = o.refresh
      ? await mapVersionCost(config, (servers[0] as EmbeddedServer).url, shards, routerOptions)
      : undefined;
    const rebalance = o.rebalance
      ? await rebalanceWithWriter(all, shards, o.migrate, o.writerAloneSeconds, routerOptions, progress)
      : undefined;
    return {
      shards,
      initMsPerShard: round(init.ms / shards),
      createRouterMs: round(made.ms, 1),
      routerRssMb: mb(routerRss),
      ...(across ? { across } : {}),
      passes,
      ...(migrate ? { migrate } : {}),
      ...(refresh ? { refresh } : {}),
      ...(rebalance ? { rebalance } : {}),
      seconds: 0,
    };
  } finally {
    await Promise.all(all.map((s) => s.stop()));
  }
}

export async function runScaleBench(options: ScaleBenchOptions = {}): Promise<ScaleBenchResult> {
  const loadBefore = loadavg()[0] as number;
  const o = {
    servers: options.servers ?? 4,
    rows: options.rows ?? 409_600,
    repeat: options.repeat ?? 5,
    samples: options.samples ?? 400,
    passBounds: [...(options.passBounds ?? [0, DEFAULT_SHARDS_PER_CONNECTION, 80])],
    passOnly: options.passOnly ?? false,
    passRounds: options.passRounds ?? 3,
    migrate: options.migrate ?? true,
    writerAloneSeconds: options.writerAloneSeconds ?? 10,
    refresh: options.refresh ?? true,
    rebalance: options.rebalance ?? true,
    ...(options.migrateParallelBuilds === undefined
      ? {}
      : { migrateParallelBuilds: options.migrateParallelBuilds }),
    ...(options.migrateBuildShare === undefined ? {} : { migrateBuildShare: options.migrateBuildShare }),
  };
  const routerOptions: RouterOptions = {
    listen: false,
    telemetry: false,
    ...(options.shardsPerStatement === undefined
      ? {}
      : { sqlShardsPerStatement: options.shardsPerStatement }),
  };
  const progress = options.onProgress ?? (() => {});
  const results: ScaleRow[] = [];
  for (const shards of options.shards ?? [256, 1024]) {
    const at = performance.now();
    const row = await runOne(shards, o, routerOptions, progress);
    results.push({ ...row, seconds: round((performance.now() - at) / 1000, 1) });
  }
  return {
    ...o,
    ...(options.shardsPerStatement === undefined ? {} : { shardsPerStatement: options.shardsPerStatement }),
    queries: { aggregate: AGGREGATE, orderLimit: ORDER_LIMIT },
    results,
    targets: {
      ratio: 3,
      firstMs: 1000,
      backendMb: 200,
      passBackendMb: 20,
      migrateThroughput: 0.5,
      migrateP99Ms: 100,
      rebalanceSecondsPerShard: 0.05,
    },
    load: { before: round(loadBefore), after: round(loadavg()[0] as number) },
    machine: { cpus: cpus().length, node: process.version },
  };
}

import { cpus, loadavg } from 'node:os';
import { type EmbeddedServer, startEmbeddedServer } from '@shardflake/embedded';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { type ClusterConfig, validateConfig } from 'shardflake/internal/config/config.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { quoteIdent } from 'shardflake/internal/postgres/identifier.js';
import { createRouter } from 'shardflake/internal/router/router.js';

/**
 * `bench sql-across`: a grouped aggregate over every shard through `router.sql`, against the same rows in one
 * table on one server, in one run on two embedded servers.
 *
 * - Rows: `rows` orders (country, amount, price) spread over `shards` logical shards (row g in shard g mod
 *   shards); the baseline table holds the same rows.
 * - The query: count, sum, avg and max per country with a WHERE, ordered by the count.
 *   Its answer must be the baseline's (checked) or the benchmark stops.
 * - Round trips: counted by the servers themselves: with `log_statement = all` each server logs every statement
 *   it receives; the log lines of `repeat` router.sql calls (nothing else runs meanwhile), per query and server.
 * - Time, three ways, each against the one table measured the same way:
 *   - cold: the first call of a new router (pools empty, parser loaded, plan made) vs the first query of a new
 *     connection;
 *   - common (the target's figure): default settings, warm pools — router.sql as it comes (sqlPrepare 'auto',
 *     which sends a repeated text's pieces as named statements) against the one table's unnamed statement, the
 *     median of `repeat` calls each side, alternating;
 *   - prepared (flattering): `router.sql(…, { prepare: true })` vs a named statement, after five runs each (so
 *     PostgreSQL may use its generic plan), median of `repeat` calls.
 * - Rows: the default is 1,000,000 (≈ 1,000 per shard). Each server's statement pays a fixed cost per shard
 *   (parsing, planning and opening its branch, ≈ 25–60 ms per server for 512 shards), so the ratio falls as the
 *   rows per shard grow; with 200,000 rows (≈ 200 per shard, two pages each) that fixed cost is most of the time.
 *   A cluster of 1,024 shards holding 200 rows each would not have been sharded; the docs list the ratio at
 *   several sizes.
 */
export interface SqlAcrossOptions {
  rows?: number;
  shards?: number;
  repeat?: number;
  onProgress?: (phase: string) => void;
}

export interface Timing {
  p50Ms: number;
  minMs: number;
}

export interface SqlAcrossResult {
  rows: number;
  shards: number;
  servers: number;
  query: string;
  groups: number;
  /** The first call of a new router vs the first query of a new connection. */
  cold: { routerMs: number; oneTableMs: number; ratio: number };
  /** Default settings, warm pools: the common case, and the target's figure. */
  router: Timing;
  oneTable: Timing;
  ratio: number;
  /** Prepared statements on both sides, warm. */
  prepared: { router: Timing; oneTable: Timing; ratio: number };
  /** The machine's load average (1 minute) before and after the run. */
  load: { before: number; after: number };
  targetRatio: number;
  meetsTarget: boolean;
  roundTripsPerQuery: Record<string, number>;
  machine: { cpus: number; node: string };
}

export const QUERY =
  'SELECT country, count(*) AS orders, sum(amount) AS amount, avg(price) AS avg_price, max(amount) AS largest FROM orders WHERE amount > $1 GROUP BY country ORDER BY orders DESC, country';
/** The orders table of bench sql-across and bench scale (one per shard, and one plain table as the baseline). */
export const TABLE =
  'CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT next_id(), country text NOT NULL, amount int NOT NULL, price numeric(10,2) NOT NULL)';
const COUNTRIES =
  "ARRAY['ar','au','br','ca','cn','de','eg','es','fr','gb','id','in','it','jp','kr','mx','ng','pl','tr','us']";
/** Row g's country, amount and price, from generate_series's `g`. */
export const COLUMNS = `(${COUNTRIES})[1 + (g * 7) % 20], (g * 31) % 1000, ((g * 17) % 10000) / 100.0`;

/** The cluster of bench sql-across and bench scale: the orders table in `shards` shards over `servers`. */
export function ordersConfig(
  servers: readonly { name: string; url: string }[],
  shards: number,
  source: string,
  /** More of the config (bench scale's migration). */
  more: Record<string, unknown> = {},
): ClusterConfig {
  return validateConfig(
    {
      servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
      catalog: 'a',
      logicalShards: shards,
      epoch: '2024-01-01T00:00:00Z',
      tables: { orders: TABLE },
      ...more,
    },
    source,
  );
}

/** Each server's statements filling its shards' orders: row g of `rows` in shard g mod `shards`. */
export function fillStatements(
  placement: (shard: number) => { server: string; schema: string },
  shards: number,
  rows: number,
): Map<string, string[]> {
  const byServer = new Map<string, string[]>();
  for (let shard = 0; shard < shards; shard++) {
    const p = placement(shard);
    const list = byServer.get(p.server) ?? [];
    list.push(
      `INSERT INTO ${quoteIdent(p.schema, 'schema')}.orders (country, amount, price) SELECT ${COLUMNS} FROM generate_series(${shard}, ${rows - 1}, ${shards}) AS g`,
    );
    byServer.set(p.server, list);
  }
  return byServer;
}
export const TARGET_RATIO = 3;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const LOG_WAIT_MS = 1000;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const round = (n: number) => Math.round(n * 100) / 100;

export async function runSqlAcrossBench(options: SqlAcrossOptions = {}): Promise<SqlAcrossResult> {
  const rows = options.rows ?? 1_000_000;
  const loadBefore = loadavg()[0] as number;
  const shards = options.shards ?? 1024;
  const repeat = options.repeat ?? 15;
  const progress = options.onProgress ?? (() => {});
  progress('servers');
  // Each server counts the statements it is sent (log_statement = all: one log line per statement).
  const received = new Map<string, number>();
  const servers: EmbeddedServer[] = [];
  const start = async (name: string) =>
    servers.push(
      await startEmbeddedServer(name, {
        settings: { autovacuum: 'off', log_statement: 'all' },
        onLog: (text) => {
          // The query's statements only (they name the orders tables), not the router's background recovery pass.
          for (const line of text.split('\n'))
            if (/LOG: {2}(statement|execute [^:]*):/.test(line) && line.includes('.orders'))
              received.set(name, (received.get(name) ?? 0) + 1);
        },
      }),
    );
  try {
    await Promise.all([start('a'), start('b')]);
    servers.sort((x, y) => x.name.localeCompare(y.name));
    const config = ordersConfig(servers, shards, 'bench sql-across');
    progress('init');
    await initCluster(config);
    const routerOptions = { listen: false, telemetry: false };
    const router = await createRouter(config, routerOptions);
    try {
      progress('load');
      // One statement per server fills its shards (row g in shard g mod shards), then the one-table copy.
      const byServer = fillStatements((shard) => router.placement(shard), shards, rows);
      await Promise.all(
        servers.map(async (s) => {
          const client = await connect(s.url);
          try {
            await client.query((byServer.get(s.name) ?? []).join(';\n'));
            await client.query('ANALYZE');
          } finally {
            await client.end();
          }
        }),
      );
      const one = await connect((servers[0] as EmbeddedServer).url);
      try {
        await one.query('CREATE SCHEMA one_table');
        await one.query('SET search_path TO one_table');
        await one.query(TABLE.replace(' DEFAULT next_id()', ''));
        await one.query(`INSERT INTO orders SELECT g, ${COLUMNS} FROM generate_series(0, ${rows - 1}) AS g`);
        await one.query('ANALYZE orders');

        progress('measure');
        const values = [100];
        const show = (r: unknown) => JSON.stringify(r, (_k, v) => (typeof v === 'bigint' ? String(v) : v));
        const expected = show((await one.query(QUERY, values)).rows);
        // Cold: a new router's first call (pools empty, plan not cached; the parser loads with the process's first
        // call) vs a new connection's first query.
        const cold = await createRouter(config, routerOptions);
        let t = performance.now();
        let first: Awaited<ReturnType<typeof router.sql>>;
        try {
          first = await cold.sql(QUERY, values);
        } finally {
          await cold.close();
        }
        const coldRouterMs = performance.now() - t;
        if (show(first.rows) !== expected)
          throw new Error('bench sql-across: router.sql and the one table answered differently');
        t = performance.now();
        const fresh = await connect((servers[0] as EmbeddedServer).url);
        try {
          await fresh.query(QUERY.replace(' FROM orders ', ' FROM one_table.orders '), values);
        } finally {
          await fresh.end();
        }
        const coldOneMs = performance.now() - t;
        await router.sql(QUERY, values);

        // Round trips: only router.sql runs while the servers count (log lines arrive a moment later).
        await sleep(LOG_WAIT_MS);
        received.clear();
        for (let i = 0; i < repeat; i++) await router.sql(QUERY, values);
        await sleep(LOG_WAIT_MS);
        const roundTripsPerQuery: Record<string, number> = {};
        for (const s of servers) roundTripsPerQuery[s.name] = round((received.get(s.name) ?? 0) / repeat);

        const alternate = async (
          routerCall: () => Promise<unknown>,
          oneCall: () => Promise<unknown>,
          warm: number,
        ): Promise<{ router: Timing; oneTable: Timing; ratio: number }> => {
          for (let i = 0; i < warm; i++) {
            await routerCall();
            await oneCall();
          }
          const routerMs: number[] = [];
          const oneMs: number[] = [];
          for (let i = 0; i < repeat; i++) {
            let at = performance.now();
            await routerCall();
            routerMs.push(performance.now() - at);
            at = performance.now();
            await oneCall();
            oneMs.push(performance.now() - at);
          }
          const r = median(routerMs);
          const o = median(oneMs);
          return {
            router: { p50Ms: round(r), minMs: round(Math.min(...routerMs)) },
            oneTable: { p50Ms: round(o), minMs: round(Math.min(...oneMs)) },
            ratio: round(r / o),
          };
        };
        const common = await alternate(
          () => router.sql(QUERY, values),
          () => one.query(QUERY, values),
          0,
        );
        const prepared = await alternate(
          () => router.sql(QUERY, values, { prepare: true }),
          () => one.query({ name: 'bench_sql_across', text: QUERY, values }),
          6,
        );
        const checked = await router.sql(QUERY, values, { prepare: true });
        if (show(checked.rows) !== expected)
          throw new Error('bench sql-across: prepared router.sql and the one table answered differently');
        return {
          rows,
          shards,
          servers: servers.length,
          query: QUERY,
          groups: first.rows.length,
          cold: {
            routerMs: round(coldRouterMs),
            oneTableMs: round(coldOneMs),
            ratio: round(coldRouterMs / coldOneMs),
          },
          router: common.router,
          oneTable: common.oneTable,
          ratio: common.ratio,
          prepared,
          load: { before: round(loadBefore), after: round(loadavg()[0] as number) },
          targetRatio: TARGET_RATIO,
          meetsTarget: common.ratio <= TARGET_RATIO,
          roundTripsPerQuery,
          machine: { cpus: cpus().length, node: process.version },
        };
      } finally {
        await one.end();
      }
    } finally {
      await router.close();
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

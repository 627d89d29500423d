import { cpus } from 'node:os';
import { type EmbeddedServer, startEmbeddedServer } from '@shardflake/embedded';
import { validateConfig } from 'shardflake/internal/cluster/config.js';
import { initCluster } from 'shardflake/internal/cluster/init.js';
import { createRouter } from 'shardflake/internal/cluster/router/router.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { quoteIdent } from 'shardflake/internal/postgres/identifier.js';

/**
 * `bench sql-across`: a grouped aggregate over every shard through `router.sql`, against the same rows in one
 * table on one server, in one run on two embedded servers.
 *
 * - Rows: `rows` orders (country, amount, price) spread over `shards` logical shards (row g in shard g mod
 *   shards); the baseline table holds the same rows.
 * - The query: count, sum, avg and max per country with a WHERE, ordered by the count — unprepared on both sides.
 *   Its answer must be the baseline's (checked) or the benchmark stops.
 * - Round trips: counted by the servers themselves: with `log_statement = all` each server logs every statement
 *   it receives; the log lines of `repeat` router.sql calls (nothing else runs meanwhile), per query and server.
 * - Time: the first call of a new router (parser loaded, plan made: the common cold path), then the median of
 *   `repeat` calls each side, alternating; the ratio router / one table. Target ≤ 3×.
 */
export interface SqlAcrossOptions {
  rows?: number;
  shards?: number;
  repeat?: number;
  onProgress?: (phase: string) => void;
}

export interface SqlAcrossResult {
  rows: number;
  shards: number;
  servers: number;
  query: string;
  groups: number;
  firstCallMs: number;
  router: { p50Ms: number; minMs: number };
  oneTable: { p50Ms: number; minMs: number };
  ratio: number;
  targetRatio: number;
  meetsTarget: boolean;
  roundTripsPerQuery: Record<string, number>;
  machine: { cpus: number; node: string };
}

export const QUERY =
  'SELECT country, count(*) AS orders, sum(amount) AS amount, avg(price) AS avg_price, max(amount) AS largest FROM orders WHERE amount > $1 GROUP BY country ORDER BY orders DESC, country';
const TABLE =
  'CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT next_id(), country text NOT NULL, amount int NOT NULL, price numeric(10,2) NOT NULL)';
const COUNTRIES =
  "ARRAY['ar','au','br','ca','cn','de','eg','es','fr','gb','id','in','it','jp','kr','mx','ng','pl','tr','us']";
const COLUMNS = `(${COUNTRIES})[1 + (g * 7) % 20], (g * 31) % 1000, ((g * 17) % 10000) / 100.0`;
export const TARGET_RATIO = 3;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const LOG_WAIT_MS = 1000;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const round = (n: number) => Math.round(n * 100) / 100;

export async function runSqlAcrossBench(options: SqlAcrossOptions = {}): Promise<SqlAcrossResult> {
  const rows = options.rows ?? 200_000;
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
          for (const line of text.split('\n'))
            if (/LOG: {2}(statement|execute [^:]*):/.test(line))
              received.set(name, (received.get(name) ?? 0) + 1);
        },
      }),
    );
  try {
    await Promise.all([start('a'), start('b')]);
    servers.sort((x, y) => x.name.localeCompare(y.name));
    const config = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: shards,
        epoch: '2024-01-01T00:00:00Z',
        tables: { orders: TABLE },
      },
      'bench sql-across',
    );
    progress('init');
    await initCluster(config);
    const router = await createRouter(config, { listen: false, telemetry: false });
    try {
      progress('load');
      // One statement per server fills its shards (row g in shard g mod shards), then the one-table copy.
      const byServer = new Map<string, string[]>();
      for (let shard = 0; shard < shards; shard++) {
        const p = router.placement(shard);
        const list = byServer.get(p.server) ?? [];
        list.push(
          `INSERT INTO ${quoteIdent(p.schema, 'schema')}.orders (country, amount, price) SELECT ${COLUMNS} FROM generate_series(${shard}, ${rows - 1}, ${shards}) AS g`,
        );
        byServer.set(p.server, list);
      }
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
        const started = performance.now();
        const first = await router.sql(QUERY, values);
        const firstCallMs = performance.now() - started;
        const expected = await one.query(QUERY, values);
        const show = (r: unknown) => JSON.stringify(r, (_k, v) => (typeof v === 'bigint' ? String(v) : v));
        if (show(first.rows) !== show(expected.rows))
          throw new Error('bench sql-across: router.sql and the one table answered differently');

        // Round trips: only router.sql runs while the servers count (log lines arrive a moment later).
        await sleep(LOG_WAIT_MS);
        received.clear();
        for (let i = 0; i < repeat; i++) await router.sql(QUERY, values);
        await sleep(LOG_WAIT_MS);
        const roundTripsPerQuery: Record<string, number> = {};
        for (const s of servers) roundTripsPerQuery[s.name] = round((received.get(s.name) ?? 0) / repeat);

        const routerMs: number[] = [];
        const oneMs: number[] = [];
        for (let i = 0; i < repeat; i++) {
          let t = performance.now();
          await router.sql(QUERY, values);
          routerMs.push(performance.now() - t);
          t = performance.now();
          await one.query(QUERY, values);
          oneMs.push(performance.now() - t);
        }
        const r = median(routerMs);
        const o = median(oneMs);
        return {
          rows,
          shards,
          servers: servers.length,
          query: QUERY,
          groups: first.rows.length,
          firstCallMs: round(firstCallMs),
          router: { p50Ms: round(r), minMs: round(Math.min(...routerMs)) },
          oneTable: { p50Ms: round(o), minMs: round(Math.min(...oneMs)) },
          ratio: round(r / o),
          targetRatio: TARGET_RATIO,
          meetsTarget: r / o <= TARGET_RATIO,
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

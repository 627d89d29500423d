import { startEmbeddedServer } from '@shardflake/embedded';
import { validateConfig } from 'shardflake/internal/cluster/config.js';
import { initCluster } from 'shardflake/internal/cluster/init.js';
import { createRouter } from 'shardflake/internal/cluster/router/router.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { quoteIdent } from 'shardflake/internal/postgres/identifier.js';
import { writeFileSync } from 'node:fs';
const rows = Number(process.argv[2] ?? 200000), shards = 1024;
let capture = false; const stmts = [];
const servers = await Promise.all(['a','b'].map((n) => startEmbeddedServer(n, { settings: { autovacuum: 'off' } })));
const TABLE = 'CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT next_id(), country text NOT NULL, amount int NOT NULL, price numeric(10,2) NOT NULL)';
const COUNTRIES = "ARRAY['ar','au','br','ca','cn','de','eg','es','fr','gb','id','in','it','jp','kr','mx','ng','pl','tr','us']";
const COLUMNS = `(${COUNTRIES})[1 + (g * 7) % 20], (g * 31) % 1000, ((g * 17) % 10000) / 100.0`;
const QUERY = 'SELECT country, count(*) AS orders, sum(amount) AS amount, avg(price) AS avg_price, max(amount) AS largest FROM orders WHERE amount > $1 GROUP BY country ORDER BY orders DESC, country';
try {
  const config = validateConfig({ servers: Object.fromEntries(servers.map((s) => [s.name, s.url])), catalog: 'a', logicalShards: shards, epoch: '2024-01-01T00:00:00Z', tables: { orders: TABLE } }, 'x');
  await initCluster(config);
  const router = await createRouter(config, { listen: false, telemetry: false });
  const byServer = new Map();
  for (let shard = 0; shard < shards; shard++) { const p = router.placement(shard); const l = byServer.get(p.server) ?? []; l.push(`INSERT INTO ${quoteIdent(p.schema,'schema')}.orders (country, amount, price) SELECT ${COLUMNS} FROM generate_series(${shard}, ${rows - 1}, ${shards}) AS g`); byServer.set(p.server, l); }
  await Promise.all(servers.map(async (s) => { const c = await connect(s.url); await c.query(byServer.get(s.name).join(';\n')); await c.query('ANALYZE'); await c.end(); }));
  const a = await connect(servers[0].url);
  // capture the statement text
  const pg = (await import('pg')).default;
  const orig = pg.Client.prototype.query;
  pg.Client.prototype.query = function (q, ...rest) { if (capture && typeof q === 'object' && q.text) stmts.push(q.text); return orig.call(this, q, ...rest); };
  capture = true; await router.sql(QUERY, [100]); capture = false;
  pg.Client.prototype.query = orig;
  const text = stmts.find((s) => s.length > 1000);
  writeFileSync('/tmp/perf/stmt.sql', text);
  console.log(text.slice(0, 700)); console.log('...', text.slice(-400));
  await a.query('CREATE SCHEMA one_table; SET search_path TO one_table'); await a.query(TABLE.replace(' DEFAULT next_id()', ''));
  await a.query(`INSERT INTO orders SELECT g, ${COLUMNS} FROM generate_series(0, ${rows - 1}) AS g`); await a.query('ANALYZE orders');


  const time = async (c, q) => { const t = performance.now(); await c.query(q); return performance.now() - t; };
  const med = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  const b = await connect(servers[0].url); await b.query('SET max_parallel_workers_per_gather = 0; SET search_path TO one_table');
  const cfgs = { oneTable: [a, { text: QUERY, values: [100] }], oneTableNoPar: [b, { text: QUERY, values: [100] }], current: [a, { text, values: [100] }], noParallel: [b, { text, values: [100] }],
    currentPrepared: [a, { name: 'p1', text, values: [100] }], noParallelPrepared: [b, { name: 'p2', text, values: [100] }] };
  const res = Object.fromEntries(Object.keys(cfgs).map((k) => [k, []]));
  for (let i = 0; i < 12; i++) for (const [k, [c, q]] of Object.entries(cfgs)) res[k].push(await time(c, q));
  for (const [k, v] of Object.entries(res)) console.log(k, 'p50', med(v.slice(6)).toFixed(1), 'min', Math.min(...v.slice(6)).toFixed(1));
  for (const c of [a, b]) { const pl = []; for (let i = 0; i < 5; i++) { const r = await c.query(`EXPLAIN (SUMMARY) ${text}`, [100]); pl.push(Number(/([\d.]+) ms/.exec(r.rows.at(-1)['QUERY PLAN'])[1])); } console.log(c === a ? 'planning (parallel on)' : 'planning (parallel off)', med(pl)); }
  await b.end();
  writeFileSync('/tmp/perf/url', servers[0].url);
  await a.end(); await router.close();
} finally { if (!process.env.KEEP) await Promise.all(servers.map((s) => s.stop())); }

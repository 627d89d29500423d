// What one router.sql piece costs a server: one embedded server with 2,048 shards of bench scale's orders (50 rows
// each), the grouped aggregate over the UNION ALL of 64 shards (the size of a piece), 30 calls per way on a warm
// connection: unprepared (as router.sql sends it by default), with some planner settings, and as a named prepared
// statement; EXPLAIN (ANALYZE, SUMMARY) splits planning from execution. Usage: npm run build && node
// scripts/sql-piece-cost.mjs

import { ordersConfig } from '../packages/cli/dist/bench/sql-across.js';
import { startEmbeddedServers } from '../packages/embedded/dist/index.js';
import { initCluster } from '../packages/shardflake/dist/admin/init.js';
import { connect } from '../packages/shardflake/dist/postgres/connect.js';

const [s] = await startEmbeddedServers(1, { settings: { autovacuum: 'off' } });
try {
  const config = ordersConfig([s], 2048, 'x');
  await initCluster(config);
  const c = await connect(s.url);
  const schemas = (
    await c.query("SELECT nspname FROM pg_namespace WHERE nspname ~ '^shard_[0-9]+$' ORDER BY 1")
  ).rows.map((r) => r.nspname);
  for (let i = 0; i < schemas.length; i += 256)
    await c.query(
      schemas
        .slice(i, i + 256)
        .map(
          (sc) =>
            `INSERT INTO ${sc}.orders (country, amount, price) SELECT (ARRAY['fr','us','de'])[1 + g % 3], g % 500, (g % 97)::numeric FROM generate_series(1, 50) g`,
        )
        .join(';'),
    );
  await c.query('VACUUM ANALYZE');
  const piece = (list) =>
    `SELECT country, count(*) AS orders, sum(amount) AS amount, avg(price) AS avg_price, max(amount) AS largest FROM (${list.map((sc) => `(SELECT country, amount, price FROM ${sc}.orders WHERE amount > $1)`).join(' UNION ALL ')}) u GROUP BY country`;
  const text = piece(schemas.slice(0, 64));
  const run = async (label, setup) => {
    const cc = await connect(s.url);
    if (setup) await cc.query(setup);
    // warm catalog caches
    await cc.query(text, [100]);
    const t = [];
    for (let i = 0; i < 30; i++) {
      const a = performance.now();
      await cc.query(text, [100]);
      t.push(performance.now() - a);
    }
    const ex = (await cc.query(`EXPLAIN (ANALYZE, SUMMARY) ${text.replaceAll('$1', '100')}`)).rows
      .map((r) => r['QUERY PLAN'])
      .filter((l) => /Planning Time|Execution Time/.test(l));
    t.sort((x, y) => x - y);
    console.log(label.padEnd(40), 'p50', t[15].toFixed(2), 'ms', ex.join(' | '));
    await cc.end();
  };
  await run('default');
  await run('no index/bitmap scans', 'SET enable_indexscan = off; SET enable_bitmapscan = off');
  await run('jit off', 'SET jit = off');
  const cc = await connect(s.url);
  const t = [];
  for (let i = 0; i < 40; i++) {
    const a = performance.now();
    await cc.query({ name: 'p', text, values: [100] });
    t.push(performance.now() - a);
  }
  t.sort((x, y) => x - y);
  console.log('named prepared p50'.padEnd(40), t[20].toFixed(2));
  await cc.end();
  await c.end();
} finally {
  await s.stop();
}

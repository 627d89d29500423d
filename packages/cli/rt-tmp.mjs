import { startEmbeddedServer } from '@shardflake/embedded';
import { validateConfig } from 'shardflake/internal/cluster/config.js';
import { initCluster } from 'shardflake/internal/cluster/init.js';
import { createRouter } from 'shardflake/internal/cluster/router/router.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { queryBatch } from 'shardflake/internal/postgres/batch.js';
import { shardForKey } from 'shardflake/internal/cluster/shard-key.js';
const servers = await Promise.all([startEmbeddedServer('a')]);
try {
  const users = 'id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text';
  const config = validateConfig({ servers: { a: servers[0].url }, catalog: 'a', logicalShards: 64,
    tables: { users: `CREATE TABLE users (${users})`, plain_users: `CREATE TABLE plain_users (${users})` },
    lookups: { user_email: { table: 'users', column: 'email', unique: true } } }, 'cfg');
  await initCluster(config);
  const c = await connect(servers[0].url);
  await c.query('CREATE SCHEMA one; CREATE TABLE one.users (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL, email text UNIQUE)');
  const sch = (n) => `"shard_${String(n).padStart(4, '0')}"`;
  const med = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  const N = 1500; let n = 0;
  const t = { one: [], plainShard: [], rt1: [], rt2: [], both: [], rt1nolookup: [] };
  for (let i = 0; i < N; i++) {
    const e = `u${n++}@x.com`;
    let s = performance.now();
    await c.query('INSERT INTO one.users (name, email) VALUES ($1, $2) RETURNING id', ['x', e]);
    t.one.push(performance.now() - s);
    const shard = i % 64, es = shardForKey(e, 64);
    s = performance.now();
    await c.query(`INSERT INTO ${sch(shard)}.plain_users (name, email) VALUES ($1, $2) RETURNING id`, ['x', e]);
    t.plainShard.push(performance.now() - s);
    s = performance.now();
    const [, , ins, ch] = await queryBatch(c, [{ text: 'BEGIN' }, { text: `SET LOCAL search_path TO ${sch(shard)}` }, { text: `INSERT INTO ${sch(shard)}.users (name, email) VALUES ($1, $2) RETURNING id`, values: ['x', e] }, { text: `DELETE FROM ${sch(shard)}._shardflake_lookup_changes RETURNING seq, lookup, value, id, delta, is_unique` }]);
    const m = performance.now(); t.rt1.push(m - s);
    const id = ins.rows[0].id; const tbl = `${sch(es)}._shardflake_lookup_user_email`;
    await queryBatch(c, [{ text: `INSERT INTO ${tbl} (value, id) SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT DO NOTHING`, values: [[e], [id]] }, { text: `SELECT 1 / (count(*) = 0)::int FROM ${tbl} e JOIN unnest($1::text[], $2::bigint[]) AS g(value, id) ON e.value = g.value AND e.id <> g.id`, values: [[e], [id]] }, { text: 'COMMIT' }]);
    t.rt2.push(performance.now() - m); t.both.push(performance.now() - s);
    s = performance.now();
    await queryBatch(c, [{ text: 'BEGIN' }, { text: `INSERT INTO ${sch(shard)}.plain_users (name, email) VALUES ($1, $2) RETURNING id`, values: ['x', e] }, { text: 'COMMIT' }]);
    t.rt1nolookup.push(performance.now() - s);
  }
  for (const [k, v] of Object.entries(t)) console.log(k, med(v.slice(200)).toFixed(3));
  await c.end();
} finally { await Promise.all(servers.map((s) => s.stop())); }

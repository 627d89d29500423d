import { startEmbeddedServer } from '@shardflake/embedded';
import { validateConfig } from 'shardflake/internal/cluster/config.js';
import { initCluster } from 'shardflake/internal/cluster/init.js';
import { createRouter } from 'shardflake/internal/cluster/router/router.js';
import { createPool } from 'shardflake/internal/postgres/connect.js';
import pg from 'pg';
const servers = await Promise.all([startEmbeddedServer('a'), startEmbeddedServer('b')]);
let inQuery = 0, nq = 0;
const orig = pg.Client.prototype.query;
pg.Client.prototype.query = function (...args) { const t = performance.now(); nq++; const r = orig.apply(this, args); if (r && typeof r.then === 'function') r.then(() => { inQuery += performance.now() - t; }, () => { inQuery += performance.now() - t; }); return r; };
try {
  const users = 'id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text';
  const config = validateConfig({ servers: Object.fromEntries(servers.map((s) => [s.name, s.url])), catalog: 'a', logicalShards: 64,
    tables: { users: `CREATE TABLE users (${users})`, plain_users: `CREATE TABLE plain_users (${users})` },
    lookups: { user_email: { table: 'users', column: 'email', unique: true } } }, 'cfg');
  await initCluster(config);
  const router = await createRouter(config, { poolSize: 4 });
  const pool = createPool(servers[0].url, { max: 4 });
  await pool.query('CREATE SCHEMA one; CREATE TABLE one.users (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL, email text UNIQUE)');
  const email = (i) => `user${i}@example.com`;
  const same = [], other = [];
  for (let i = 0; same.length < 3000 || other.length < 3000; i++) { const s = router.placement(router.shardFor(`u${i}`)).server === router.placement(router.shardFor(email(i))).server; (s ? same : other).push(i); }
  const mode = process.argv[2] ?? 'all';
  const run = async (label, list, fn) => {
    for (let k = 0; k < 200; k++) await fn(list[k]);
    inQuery = 0; nq = 0; const t = performance.now(); const N = 1000; const ms = [];
    for (let k = 200; k < 200 + N; k++) { const s = performance.now(); await fn(list[k]); ms.push(performance.now() - s); }
    const total = performance.now() - t; ms.sort((x, y) => x - y);
    console.log(`${label}: p50 ${ms[N/2].toFixed(3)} mean ${(total/N).toFixed(3)} ms, in pg.query ${(inQuery/N).toFixed(3)} ms, queries/op ${(nq/N).toFixed(2)}`);
  };
  let n = 1e6;
  await run('one-table insert', same, (i) => pool.query('INSERT INTO one.users (name, email) VALUES ($1, $2) RETURNING id', [`x${n++}`, email(n)]));
  await run('router plain insert', same, (i) => router.insert('plain_users', { name: `u${i}`, email: email(i) }, { key: `u${i}` }));
  await run('signup same', same, (i) => router.insert('users', { name: `u${i}`, email: email(i) }, { key: `u${i}` }));
  await run('signup other', other, (i) => router.insert('users', { name: `u${i}`, email: email(i) }, { key: `u${i}` }));
  await run('login one', same, (i) => pool.query('SELECT * FROM one.users WHERE email = $1', [email(i)]));
  await run('login fetch', same, (i) => router.lookup('user_email', email(i), { fetch: true }));
  await router.close(); await pool.end();
} finally { await Promise.all(servers.map((s) => s.stop())); }

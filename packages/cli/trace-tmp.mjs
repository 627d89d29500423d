import { startEmbeddedServer } from '@shardflake/embedded';
import { validateConfig } from 'shardflake/internal/cluster/config.js';
import { initCluster } from 'shardflake/internal/cluster/init.js';
import { createRouter } from 'shardflake/internal/cluster/router/router.js';
let logging = false;
const lines = [];
const start = (name) => startEmbeddedServer(name, { settings: { log_statement: 'all', log_line_prefix: '%p ' }, onLog: (t) => { if (logging) for (const l of t.split('\n')) if (l.trim()) lines.push(`${name} ${l}`); } });
const servers = await Promise.all([start('a'), start('b')]);
try {
  const users = 'id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text';
  const config = validateConfig({ servers: Object.fromEntries(servers.map((s) => [s.name, s.url])), catalog: 'a', logicalShards: 64,
    tables: { users: `CREATE TABLE users (${users})`, plain_users: `CREATE TABLE plain_users (${users})` },
    lookups: { user_email: { table: 'users', column: 'email', unique: true } } }, 'cfg');
  await initCluster(config);
  const router = await createRouter(config, { poolSize: 4 });
  const email = (i) => `user${i}@example.com`;
  const show = async (label, fn) => { await new Promise(r => setTimeout(r, 300)); lines.length = 0; logging = true; await fn(); await new Promise(r => setTimeout(r, 500)); logging = false; console.log(`=== ${label}: ${lines.length} lines`); for (const l of lines) console.log(l.slice(0, 300)); };
  for (let i = 0; i < 10; i++) await router.insert('users', { name: `u${i}`, email: email(i) }, { key: `u${i}` });
  await show('login fetch (warm)', () => router.lookup('user_email', email(3), { fetch: true }));
  await show('login lookup+get', async () => { const h = await router.lookup('user_email', email(4)); await router.get('users', h.id); });
  // sign-up: find a name whose entry is same server and one other
  const same = [], other = [];
  for (let i = 100; same.length < 2 || other.length < 2; i++) { const s = router.placement(router.shardFor(`u${i}`)).server === router.placement(router.shardFor(email(i))).server; (s ? same : other).push(i); }
  await show('sign-up same server', () => router.insert('users', { name: `u${same[0]}`, email: email(same[0]) }, { key: `u${same[0]}` }));
  await show('sign-up same server 2', () => router.insert('users', { name: `u${same[1]}`, email: email(same[1]) }, { key: `u${same[1]}` }));
  await show('sign-up other server', () => router.insert('users', { name: `u${other[0]}`, email: email(other[0]) }, { key: `u${other[0]}` }));
  await show('sign-up other server 2', () => router.insert('users', { name: `u${other[1]}`, email: email(other[1]) }, { key: `u${other[1]}` }));
  await show('plain insert (router)', () => router.insert('plain_users', { name: 'p1', email: 'x' }, { key: 'p1' }));
  await router.close();
} finally { await Promise.all(servers.map((s) => s.stop())); }

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createRouter, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { verifyLookups } from '../../packages/shardflake/src/lookups/verify.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { closeAll, connectAll } from '../../packages/shardflake/src/topology/connections.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { usersWithEmailLookup } from './cluster-config.js';

const servers = await useServers(2);
const config = usersWithEmailLookup(servers);
let router: Router;

before(async () => {
  await initCluster(config);
  router = await createRouter(config);
});
after(async () => {
  await router?.close();
});

test('a shard move copies and verifies the lookup entries with the shard’s rows; lookups and claims work on the new home', async () => {
  const emails = Array.from({ length: 40 }, (_, i) => `mover${i}@x`);
  const ids = await router.insertMany(
    'users',
    emails.map((email, i) => ({ name: `m${i}`, email })),
    { key: (_r, i) => i },
  );
  // Shard 0 (on a) holds rows and the entries of the values that hash to it.
  const shard = 0;
  const entriesHere = emails.filter((e) => shardForKey(e, 4) === shard);
  assert.ok(entriesHere.length > 0);
  const result = await moveShard(config, shard, 'b');
  // users, _shardflake_migrations, _shardflake_lookup_changes, _shardflake_lookup_user_email: all copied and
  // compared by the move's verification.
  assert.equal(result.tables, 4);
  const target = await connect(defined(servers.find((s) => s.name === 'b')).url);
  const { rows } = await target.query(
    `SELECT count(*)::int AS n FROM "${shardSchema(config, shard)}"._shardflake_lookup_user_email`,
  );
  assert.equal(rows[0].n, entriesHere.length);
  await target.end();
  await router.refresh();
  for (const [i, email] of emails.entries())
    assert.deepEqual(await router.lookup('user_email', email), { id: ids[i], shard: i % 4 });
  // A claim whose entry lives in the moved shard is refused there, on its new server.
  const clash = entriesHere[0] as string;
  await assert.rejects(router.insert('users', { name: 'late', email: clash }, { key: 1 }), /user_email/);
  const fresh = Array.from({ length: 50 }, (_, i) => `fresh${i}@x`).find(
    (e) => shardForKey(e, 4) === shard,
  ) as string;
  const id = await router.insert('users', { name: 'fresh', email: fresh }, { key: 3 });
  assert.deepEqual(await router.lookup('user_email', fresh), { id, shard: 3 });
  const clients = await connectAll(config);
  try {
    assert.deepEqual(await verifyLookups(config, clients), []);
  } finally {
    await closeAll(clients);
  }
});

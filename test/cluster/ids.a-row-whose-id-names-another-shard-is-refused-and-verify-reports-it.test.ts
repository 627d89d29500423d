import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { verifyCluster } from '../../packages/shardflake/src/admin/verify.js';
import { recordOldIdsBelow } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { encodeId } from '../../packages/shardflake/src/ids/codec.js';
import { asId } from '../../packages/shardflake/src/ids/id.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { idShardRule } from '../../packages/shardflake/src/postgres/id-shard-rule.js';
import { createRouter, type Router } from '../../packages/shardflake/src/router/router.js';
import { sqlRows, useServers } from '../support/postgres.js';
import { usersWithEmailLookup } from './cluster-config.js';

/**
 * Issue 32, item 5: an explicit id whose bits name another shard was accepted; the row then existed where get and
 * lookups never look (they go to the shard the id names), and `cluster verify` failed its lookup check. Now every
 * sharded table whose id comes from next_id() carries a CHECK constraint made from one rule
 * (postgres/id-shard-rule.ts), so PostgreSQL refuses such a row whatever client writes it, and verify lists rows
 * that broke the rule before it was there. The same rule, with an old-id bound (adopted rows keep their bigserial
 * ids), exempts ids below it; the predicate and the SQL are checked to agree on real servers.
 */
const servers = await useServers(2);
const config = usersWithEmailLookup(servers); // users (id, name, email) in 4 shards, lookup user_email
const [a, b] = servers.map((s) => s.url) as [string, string];
let router: Router;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 2 });
});
after(() => router?.close());

/** An id made now whose shard bits name `shard` (and a sequence of our choice). */
const idOf = (shard: number, sequence = 1) =>
  encodeId({ timestamp: Date.now(), fields: { shard, sequence } }, config.layout);
const urlOf = (shard: number) => (router.placement(shard).server === 'a' ? a : b);

test('a row whose id names another shard is refused through the router, in a session, and from a plain client', async () => {
  const wrong = idOf(1);
  await assert.rejects(
    router.insert('users', { id: wrong, name: 'x', email: 'x@example.com' }, { shard: 0 }),
    (e: unknown) => {
      assert.ok(isShardflakeError(e, 'ID_WRONG_SHARD'), String(e));
      assert.equal(e.sqlState, '23514');
      assert.match(e.message, /table users has an id whose bits name another shard/);
      return true;
    },
  );
  await assert.rejects(
    router.withShard({ shard: 2 }, (s) =>
      s.query('INSERT INTO users (id, name) VALUES ($1, $2)', [idOf(3), 'y']),
    ),
    (e: unknown) => isShardflakeError(e, 'ID_WRONG_SHARD'),
  );
  // psql, an ORM, anything: the constraint is PostgreSQL's.
  await assert.rejects(
    sqlRows(urlOf(3), `INSERT INTO ${shardSchema(config, 3)}.users (id, name) VALUES (${idOf(0)}, 'z')`),
    /violates check constraint "_shardflake_id_in_this_shard"/,
  );
  // Moving an existing row's id to another shard's is refused too.
  const id = await router.insert('users', { name: 'w' }, { shard: 0 });
  await assert.rejects(
    router.withShard({ shard: 0 }, (s) => s.query('UPDATE users SET id = $1 WHERE id = $2', [idOf(2), id])),
    (e: unknown) => isShardflakeError(e, 'ID_WRONG_SHARD'),
  );
  // An explicit id of the right shard is fine, and found.
  const right = idOf(1, 7);
  assert.equal(
    await router.insert('users', { id: right, name: 'v', email: 'v@example.com' }, { shard: 1 }),
    right,
  );
  assert.equal(((await router.get('users', asId(right))) as { name: string }).name, 'v');
  assert.deepEqual(await router.lookup('user_email', 'v@example.com'), { id: right, shard: 1 });
  assert.equal((await verifyCluster(config)).problems.filter((p) => p.check === 'ids').length, 0);
});

test('rows written before the rule are reported by verify; migrate puts the rule back (checking new writes at once) and validates it once they are gone', async () => {
  const schema = shardSchema(config, 2);
  const url = urlOf(2);
  // A cluster from before the rule: no constraint, and a row that names shard 0 sitting in shard 2.
  await sqlRows(url, `ALTER TABLE ${schema}.users DROP CONSTRAINT _shardflake_id_in_this_shard`);
  const stray = idOf(0, 99);
  await sqlRows(url, `INSERT INTO ${schema}.users (id, name) VALUES (${stray}, 'stray')`);
  const before = (await verifyCluster(config)).problems.filter((p) => p.check === 'ids');
  assert.deepEqual(
    before.map((p) => [p.where, p.what.replace(/\(docs.*$/, '')]),
    [
      [
        `shard 2 (server ${router.placement(2).server}) table users`,
        `1 row whose id names another shard (id ${stray} names shard 0): get, update, delete and lookups look for them there and do not find them; write each row again in the shard its id names, or with an id from this shard's next_id() `,
      ],
      [
        `shard 2 (server ${router.placement(2).server}) table users`,
        'writes are not checked for ids of other shards (no constraint _shardflake_id_in_this_shard); run cluster migrate',
      ],
    ],
  );
  assert.equal(await router.get('users', asId(stray)), null, 'the row exists, and get does not find it');

  const migrated = await migrateCluster(config);
  assert.deepEqual(migrated.failed, []);
  await assert.rejects(
    router.withShard({ shard: 2 }, (s) =>
      s.query('INSERT INTO users (id, name) VALUES ($1, $2)', [idOf(1), 'n']),
    ),
    (e: unknown) => isShardflakeError(e, 'ID_WRONG_SHARD'),
  );
  const still = (await verifyCluster(config)).problems.filter((p) => p.check === 'ids');
  assert.equal(still.length, 1, 'the old row is still reported; the table is checked now');
  assert.match(still[0]?.what as string, /^1 row whose id names another shard/);
  assert.deepEqual(
    await sqlRows(
      url,
      `SELECT convalidated FROM pg_constraint WHERE conname = '_shardflake_id_in_this_shard' AND conrelid = '${schema}.users'::regclass`,
    ),
    [{ convalidated: false }],
  );

  await sqlRows(url, `DELETE FROM ${schema}.users WHERE id = ${stray}`);
  await migrateCluster(config);
  assert.deepEqual(
    await sqlRows(
      url,
      `SELECT convalidated FROM pg_constraint WHERE conname = '_shardflake_id_in_this_shard' AND conrelid = '${schema}.users'::regclass`,
    ),
    [{ convalidated: true }],
  );
  assert.equal((await verifyCluster(config)).problems.filter((p) => p.check === 'ids').length, 0);
});

test('with an old-id bound recorded, migrate replaces the rule: ids below it go in any shard, and PostgreSQL agrees with idShardRule(layout, bound).allows on every id tried', async () => {
  const bound = 1_000_000n;
  const catalog = await connect(a);
  try {
    await recordOldIdsBelow(catalog, bound);
  } finally {
    await catalog.end();
  }
  assert.deepEqual((await migrateCluster(config)).failed, []);
  const rule = idShardRule(config.layout, bound);
  const shard = 3;
  const candidates = [
    0n,
    5n,
    bound - 1n,
    bound,
    idOf(3, 11),
    idOf(1, 12),
    (3n << 10n) | 5n,
    -5n,
    bound + (3n << 10n),
  ];
  const client = await connect(urlOf(shard));
  try {
    for (const id of candidates) {
      const accepted = await client
        .query(`INSERT INTO ${shardSchema(config, shard)}.users (id, name) VALUES ($1, 'old')`, [id])
        .then(
          () => true,
          (e: { code?: string }) => {
            assert.equal(e.code, '23514', String(e));
            return false;
          },
        );
      assert.equal(
        accepted,
        rule.allows(id, shard),
        `id ${id}: PostgreSQL ${accepted ? 'took' : 'refused'} it`,
      );
    }
  } finally {
    await client.end();
  }
  assert.equal((await verifyCluster(config)).problems.filter((p) => p.check === 'ids').length, 0);
});

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { verifyCluster } from '../../packages/shardflake/src/admin/verify.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * Issue 32, item 6: emails that differed in case became two accounts. A lookup with `"normalize": "lower"` keeps
 * and looks for values with ASCII letters in lower case, on every write path (router, session SQL, the build of
 * existing rows) and on every read (lookup, lookupMany, the owner check, verify): `Ann@Example.com` and
 * `ann@example.com` are one value, so a unique lookup lets one account hold it. A lookup without the option keeps
 * the text as it is (the case is part of the value), and a built lookup's option cannot change under its name.
 */
const servers = await useServers(2);
const tables = {
  users:
    'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text, nick text)',
};
const base = testConfig(servers, { logicalShards: 8, tables });
const config = testConfig(servers, {
  logicalShards: 8,
  tables,
  lookups: {
    user_email: { table: 'users', column: 'email', unique: true, normalize: 'lower' },
    user_nick: { table: 'users', column: 'nick', unique: true },
  },
});
let router: Router;
let early: bigint;

before(async () => {
  // A row from before the lookups exist: the build (cluster migrate) must keep its value lowered too.
  await initCluster(base);
  const plain = await createRouter(base, { poolSize: 2 });
  try {
    early = await plain.insert(
      'users',
      { name: 'zed', email: 'Zed@Example.COM', nick: 'Zed' },
      { key: 'zed' },
    );
  } finally {
    await plain.close();
  }
  assert.deepEqual((await migrateCluster(config)).failed, []);
  router = await createRouter(config, { poolSize: 4 });
});
after(() => router?.close());

test('a lowered lookup finds a row by its value in any case, the built one too; a second owner of it in another case is refused', async () => {
  const ann = await router.insert(
    'users',
    { name: 'ann', email: 'Ann@Example.com', nick: 'Ann' },
    { key: 'ann' },
  );
  for (const asked of ['ann@example.com', 'ANN@EXAMPLE.COM', 'Ann@Example.com'])
    assert.deepEqual(
      await router.lookup('user_email', asked),
      { id: ann, shard: router.shardOfId(ann) },
      asked,
    );
  assert.equal(((await router.lookup('user_email', 'zed@example.com')) as { id: bigint }).id, early);
  assert.deepEqual(
    (await router.lookupMany('user_email', ['ZED@example.com', 'nobody@example.com', 'aNN@example.COM'])).map(
      (h) => h?.id ?? null,
    ),
    [early, null, ann],
  );
  for (const [key, email] of [
    ['ann2', 'ann@example.com'],
    ['ann3', 'ANN@EXAMPLE.COM'],
  ] as const)
    await assert.rejects(
      router.withShard({ key }, (s) =>
        s.query('INSERT INTO users (name, email) VALUES ($1, $2)', [key, email]),
      ),
      (e: unknown) => isShardflakeError(e, 'UNIQUE_VIOLATION'),
      email,
    );
  // Changing only the case keeps the value: the row stays its owner, found as before.
  await router.update('users', ann, { email: 'ANN@example.com' });
  assert.deepEqual(await router.lookup('user_email', 'ann@example.com'), {
    id: ann,
    shard: router.shardOfId(ann),
  });
  // Without the option the case is part of the value: 'ann' is free beside 'Ann'.
  const other = await router.insert(
    'users',
    { name: 'ann4', email: 'a4@example.com', nick: 'ann' },
    { key: 'ann4' },
  );
  assert.equal(((await router.lookup('user_nick', 'ann')) as { id: bigint }).id, other);
  assert.equal(((await router.lookup('user_nick', 'Ann')) as { id: bigint }).id, ann);
  assert.equal(await router.lookup('user_nick', 'ANN'), null);
  const problems = (await verifyCluster(config)).problems.filter((p) => p.check.startsWith('lookup'));
  assert.deepEqual(problems, []);
});

test("a built lookup's normalize cannot change under its name", async () => {
  const changed = testConfig(servers, {
    logicalShards: 8,
    tables,
    lookups: { user_email: { table: 'users', column: 'email', unique: true } },
  });
  await assert.rejects(migrateCluster(changed), (e: unknown) => {
    assert.ok(isShardflakeError(e, 'INVALID_CONFIG'), String(e));
    assert.match(
      e.message,
      /lookup user_email was built for users\.email \(unique, lower\); a changed lookup needs a new name/,
    );
    return true;
  });
});

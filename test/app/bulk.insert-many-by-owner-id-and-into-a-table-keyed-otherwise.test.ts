import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createRouter, isShardflakeError, type Router, type ShardflakeId } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { testConfig } from '../cluster/cluster-config.js';
import { sqlRows, useServers } from '../support/postgres.js';

/**
 * Issue 32, item 6: insertMany could not place each row beside its owner (a user passed
 * `key: (p) => router.shardOfId(p.user_id)`, a shard number taken as a key, so rows went to another shard) and
 * could not load a table whose key is not `id` (`RETURNING id` failed). `{ id: (row) => ownerId }` puts each row in
 * the shard its owner's id names; a table without an `id` column is written whole and resolves to [] (no ids to
 * give back). Both with and without a lookup on the table (the two insertMany paths).
 */
const servers = await useServers(2);
const config = testConfig(servers, {
  logicalShards: 8,
  tables: {
    users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), email text)',
    posts: 'CREATE TABLE posts (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, body text)',
    follows: 'CREATE TABLE follows (user_id bigint, follows_id bigint, PRIMARY KEY (user_id, follows_id))',
  },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
});
let router: Router;
let plain: Router;
let users: ShardflakeId[] = [];

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 4 });
  // The same cluster through a router without lookups: the plain insertMany path.
  plain = await createRouter({ ...config, lookups: [] }, { poolSize: 4 });
  users = await router.insertMany(
    'users',
    Array.from({ length: 16 }, (_, i) => ({ email: `u${i}@example.com` })),
    { key: (_row, i) => i },
  );
});
after(async () => {
  await router?.close();
  await plain?.close();
});

/** Where each value of `column` of `table` is stored: value (as text) → the shards that hold it, read from the servers. */
async function whereIs(table: string, column: string): Promise<Map<string, number[]>> {
  const found = new Map<string, number[]>();
  for (let shard = 0; shard < 8; shard++) {
    const url = servers.find((s) => s.name === router.placement(shard).server)?.url as string;
    const rows = await sqlRows<{ v: string }>(
      url,
      `SELECT ${column}::text AS v FROM ${shardSchema(config, shard)}.${table}`,
    );
    for (const { v } of rows) found.set(v, [...(found.get(v) ?? []), shard]);
  }
  return found;
}

test('{ id: (row) => ownerId } puts every row in its owner shard, with ids of that shard, in input order', async () => {
  for (const [name, r] of [
    ['plain', () => plain],
    ['with lookups', () => router],
  ] as const) {
    const rows = users.map((owner, i) => ({ user_id: owner, body: `${name} ${i}` }));
    const ids = await r().insertMany('posts', rows, { id: (row) => row.user_id as ShardflakeId });
    assert.equal(ids.length, rows.length);
    const stored = await whereIs('posts', 'body');
    for (const [i, id] of ids.entries()) {
      const owner = users[i] as ShardflakeId;
      assert.equal(router.shardOfId(id), router.shardOfId(owner), `${name}: post ${i} beside its owner`);
      assert.deepEqual(stored.get(`${name} ${i}`), [router.shardOfId(owner)]);
    }
  }
});

test('a table keyed otherwise (no id column) is written whole, rows beside their owners, and resolves to []', async () => {
  for (const [name, r] of [
    ['plain', () => plain],
    ['with lookups', () => router],
  ] as const) {
    const offset = name === 'plain' ? 0n : 1n;
    const rows = users.map((owner, i) => ({ user_id: owner, follows_id: BigInt(i) * 10n + offset }));
    assert.deepEqual(await r().insertMany('follows', rows, { id: (row) => row.user_id as ShardflakeId }), []);
    const stored = await whereIs('follows', 'follows_id');
    for (const [i, row] of rows.entries())
      assert.deepEqual(stored.get(String(row.follows_id)), [router.shardOfId(users[i] as ShardflakeId)]);
  }
});

test('routing by more than one way, or by an id of no shard of the cluster, is refused before anything is written', async () => {
  await assert.rejects(
    router.insertMany('posts', [{ user_id: users[0], body: 'x' }], {
      id: () => users[0] as ShardflakeId,
      shard: 1,
    } as never),
    (e: unknown) => isShardflakeError(e, 'INVALID_ARGUMENT') && /one of \{ key/.test(e.message),
  );
  const stranger = (1n << 40n) | (4000n << 10n); // shard bits 4000, in a cluster of 8 shards
  await assert.rejects(
    plain.insertMany('posts', [{ user_id: stranger, body: 'nowhere' }], {
      id: (row) => row.user_id as ShardflakeId,
    }),
    (e: unknown) => isShardflakeError(e, 'INVALID_ID') && /^row 0: /.test(e.message),
  );
  assert.equal((await whereIs('posts', 'body')).get('nowhere'), undefined);
});

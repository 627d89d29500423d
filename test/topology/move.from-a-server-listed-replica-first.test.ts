import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';

/**
 * A move whose source server lists its replica first: the copy must come from the primary (a logical replication
 * slot and publication cannot be made on a replica, and a subscription to the replica would fail), which only
 * works if every step finds the roles instead of taking the first URL.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const replicaOfA = await startReplica(a);
const rawConfig = {
  catalog: 'a',
  logicalShards: 4,
  tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL)' },
};

test('a shard moves from a server whose config lists its replica first, and another from the promoted node after a failover', async () => {
  const config = validateConfig(
    { ...rawConfig, servers: { a: [replicaOfA.url, a.url], b: b.url } },
    'test-config',
  );
  await initCluster(config);
  const router = await createRouter(config);
  try {
    const ids = await router.insertMany(
      'items',
      Array.from({ length: 50 }, (_, i) => ({ note: `n${i}` })),
      { shard: 0 },
    );
    await caughtUp(a, replicaOfA);
    const result = await moveShard(config, 0, 'b');
    assert.equal(result.shard, 0);
    await router.refresh();
    assert.equal(router.placement(0).server, 'b');
    for (const id of ids.slice(0, 5)) assert.equal((await router.get('items', id))?.id, id);
  } finally {
    await router.close();
  }
  // After a failover of server a (the catalog's server) commands refuse to run while a listed node is down (they
  // need every node to answer), and run on the promoted node once the dead one is taken off the list: a rerun of
  // init finds every shard there and changes nothing, and shard 1 moves from the new primary.
  await a.stop();
  await replicaOfA.promote();
  await assert.rejects(initCluster(config), /SERVER_UNREACHABLE|unreachable/);
  const after = validateConfig(
    { ...rawConfig, servers: { a: [replicaOfA.url], b: b.url } },
    'test-config after the failover',
  );
  const rerun = await initCluster(after);
  assert.deepEqual([rerun.created, rerun.alreadyRecorded], [0, 4]);
  const second = await moveShard(after, 1, 'b');
  assert.equal(second.shard, 1);
});

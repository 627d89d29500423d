import assert from 'node:assert/strict';
import { test } from 'node:test';
import { validateConfig } from '../../src/cluster/config.js';
import { initCluster } from '../../src/cluster/init.js';
import { createRouter } from '../../src/cluster/router/router.js';
import { moveShard } from '../../src/move/move.js';
import type { EmbeddedServer } from '../../src/postgres/embedded.js';
import { useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';

/**
 * A move whose source server lists its replica first: the copy must come from the primary (a logical replication
 * slot and publication cannot be made on a replica, and a subscription to the replica would fail), which only
 * works if every step finds the roles instead of taking the first URL.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const replicaOfA = await startReplica(a);

test('a shard moves from a server whose config lists its replica first', async () => {
  const config = validateConfig(
    {
      servers: { a: [replicaOfA.url, a.url], b: b.url },
      catalog: 'a',
      logicalShards: 4,
      tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL)' },
    },
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
});

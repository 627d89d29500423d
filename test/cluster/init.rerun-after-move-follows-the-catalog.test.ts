import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { isFenced } from '../../packages/shardflake/src/fence/fence.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

const servers = await useServers(2);
const [a, b] = servers as [(typeof servers)[0], (typeof servers)[0]];

async function withClient<T>(url: string, work: (c: Awaited<ReturnType<typeof connect>>) => Promise<T>) {
  const c = await connect(url);
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

describe('cluster init after a shard move, before cleanup', () => {
  const config = testConfig(servers, { logicalShards: 4 });

  it('follows the catalog: the moved shard stays on its new server, the fenced old copy is ignored, nothing changes', async () => {
    await initCluster(config);
    await moveShard(config, 0, 'b');
    const schema = defined((await withClient(a.url, readShardMap)).shards[0]).schema;
    assert.equal(await withClient(a.url, (c) => isFenced(c, schema)), true, 'the old copy on a is fenced');

    const before = await withClient(a.url, readShardMap);
    const again = await initCluster(config);
    assert.equal(again.created, 0);
    assert.equal(again.recovered, 0);
    assert.equal(again.alreadyRecorded, 4);
    const after = await withClient(a.url, readShardMap);
    assert.deepEqual(after, before, 'a rerun on a healthy cluster changes nothing, not even the map version');
    assert.equal(again.mapVersion, before.version);
    assert.equal(defined(after.shards[0]).server, 'b');
    assert.deepEqual(again.perServer, { a: 1, b: 3 });
  });

  it('recovers a shard the catalog lost from its unfenced copy, not from the fenced old one', async () => {
    await withClient(a.url, (c) => c.query('DELETE FROM shardflake.shards WHERE shard = 0'));
    const result = await initCluster(config);
    assert.equal(result.recovered, 1);
    assert.equal(result.created, 0);
    const map = await withClient(a.url, readShardMap);
    assert.equal(defined(map.shards[0]).server, 'b');
    // The live copy still takes writes; the old one still refuses them.
    await withClient(b.url, (c) =>
      c.query(`INSERT INTO "${defined(map.shards[0]).schema}".photos (user_id) VALUES (1)`),
    );
  });
});

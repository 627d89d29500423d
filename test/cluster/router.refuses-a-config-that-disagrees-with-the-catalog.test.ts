import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { createRouter, isShardflakeError } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * Drift caught at the door: a router whose config disagrees with the catalog on the shard count, the layout or
 * the epoch refuses to start with one line saying which value, both sides (it used to take the catalog's shard
 * count quietly, so keys went to other shards than the config's tools computed).
 */
const servers = await useServers(1);
const config = testConfig(servers, { logicalShards: 8 });

before(async () => {
  await initCluster(config);
});

const refused = (line: RegExp) => (e: unknown) => {
  assert.ok(isShardflakeError(e, 'INVALID_CONFIG'), String(e));
  assert.match(e.message, line);
  assert.doesNotMatch(e.message, /\n/);
  return true;
};

describe('createRouter checks its config against the catalog', () => {
  it('refuses another shard count', async () => {
    await assert.rejects(
      createRouter(testConfig(servers, { logicalShards: 4 })),
      refused(
        /^test-config: logicalShards is 4 in the config but 8 in the cluster \(catalog server a\); the router does not start$/,
      ),
    );
  });

  it('refuses another epoch', async () => {
    await assert.rejects(
      createRouter(testConfig(servers, { logicalShards: 8, epoch: '2023-06-01T00:00:00Z' })),
      refused(/epoch is 2023-06-01T00:00:00.000Z in the config but 2024-01-01T00:00:00.000Z in the cluster/),
    );
  });

  it('refuses another layout', async () => {
    await assert.rejects(
      createRouter({ ...config, layout: { ...config.layout, name: 'custom' } }),
      refused(/layout is custom in the config but instagram in the cluster/),
    );
  });

  it('starts with a config that agrees, and with one that gives only servers and catalog', async () => {
    for (const c of [config, { servers: config.servers, catalog: config.catalog }]) {
      const router = await createRouter(c, { listen: false });
      assert.equal(router.logicalShards, 8);
      await router.close();
    }
  });
});

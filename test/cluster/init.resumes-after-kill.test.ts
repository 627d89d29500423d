import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { clusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';
import { testConfig } from './cluster-config.js';

const servers = await useServers(2);

async function schemasOn(url: string): Promise<string[]> {
  const client = await connect(url);
  const { rows } = await client.query(
    "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\\_%' ORDER BY 1",
  );
  await client.end();
  return rows.map((r: { nspname: string }) => r.nspname);
}

describe('cluster init', () => {
  const config = testConfig(servers, { logicalShards: 32 });

  it('stops mid-way when aborted, and a rerun finishes (also recording a batch the killed run did not record)', async () => {
    const controller = new AbortController();
    await assert.rejects(
      initCluster(config, {
        batchSize: 4,
        connectionsPerServer: 1,
        signal: controller.signal,
        onProgress: (done) => {
          if (done >= 8) controller.abort(new Error('killed'));
        },
      }),
    );
    const catalog = await connect(defined(servers[0]).url);
    const partial = await readShardMap(catalog);
    assert.ok(
      partial.shards.length >= 8 && partial.shards.length < 32,
      `${partial.shards.length} shards recorded`,
    );
    // A kill between a batch's commit on its server and its record in the catalog: forget one recorded shard.
    const forgotten = defined(partial.shards[0]);
    await catalog.query('DELETE FROM shardflake.shards WHERE shard = $1', [forgotten.shard]);

    const result = await initCluster(config, { batchSize: 4 });
    assert.equal(result.recovered, 1);
    assert.equal(result.created + result.alreadyRecorded + result.recovered, 32);
    const map = await readShardMap(catalog);
    await catalog.end();
    assert.deepEqual(
      map.shards.map((s) => s.shard),
      Array.from({ length: 32 }, (_, i) => i),
    );
    assert.equal(map.shards.find((s) => s.shard === forgotten.shard)?.server, forgotten.server);
    assert.deepEqual(result.perServer, { a: 16, b: 16 });
    // Each schema exists exactly once, on the server the map names.
    const onA = await schemasOn(defined(servers[0]).url);
    const onB = await schemasOn(defined(servers[1]).url);
    assert.equal(onA.length + onB.length, 32);
    for (const s of map.shards) assert.ok((s.server === 'a' ? onA : onB).includes(s.schema));
  });

  it('is harmless to run again on a finished cluster', async () => {
    const result = await initCluster(config);
    assert.equal(result.created, 0);
    assert.equal(result.alreadyRecorded, 32);
  });

  it('gives each shard a generator whose ids carry the shard number', async () => {
    const catalog = await connect(defined(servers[0]).url);
    const map = await readShardMap(catalog);
    await catalog.end();
    const last = defined(map.shards[31]);
    const client = await connect(last.server === 'a' ? defined(servers[0]).url : defined(servers[1]).url);
    const { rows } = await client.query(
      `INSERT INTO "${last.schema}".photos (user_id) VALUES (1) RETURNING id`,
    );
    await client.end();
    const id = (rows[0] as { id: bigint }).id;
    const shard = defined(config.layout.field('shard'));
    assert.equal(Number((id >> BigInt(shard.shift)) & shard.max), 31);
  });

  it('reports the map, per-server counts and the signed-bigint limit in status', async () => {
    const status = await clusterStatus(config);
    assert.equal(status.mappedShards, 32);
    assert.equal(status.shards.length, 32);
    assert.deepEqual(
      status.servers.map((s) => [s.name, s.shards, s.reachable]),
      [
        ['a', 16, true],
        ['b', 16, true],
      ],
    );
    assert.deepEqual(status.schemaVersions, { 0: 32 });
    assert.equal(status.signedOverflowAt, config.layout.signedOverflowAt?.toISOString());
    assertNoPassword(
      JSON.stringify(status),
      servers.map((s) => s.url),
      'status',
    );
  });

  it('refuses a config that disagrees with the catalog', async () => {
    await assert.rejects(initCluster(testConfig(servers, { logicalShards: 64 })), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'INVALID_CONFIG'));
      assert.match(e.message, /logicalShards 32/);
      return true;
    });
  });
});

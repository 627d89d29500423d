import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { moveShard, type VerifyMode } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { useServers } from '../support/postgres.js';
import {
  countRows,
  makeCluster,
  placement,
  replicationLeftovers,
  schemaOn,
  sleep,
  withClient,
} from './fixture.js';

test('both verification modes refuse a copy that differs from the source (rolled back), and a snapshots move under load keeps every acknowledged row', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 4);
  const [a, b] = [config.servers.a as string, config.servers.b as string];
  for (const shard of [0, 1]) {
    await withClient(a, (c) =>
      c.query(
        `INSERT INTO "${shardSchema(config, shard)}".items (note, n) SELECT 'row ' || g, g FROM generate_series(1, 5000) g`,
      ),
    );
  }

  // A row changed behind replication's back on the target (as a replication session, past the fence).
  for (const [shard, verify] of [
    [0, 'in-pause'],
    [1, 'snapshots'],
  ] as [number, VerifyMode][]) {
    const schema = shardSchema(config, shard);
    await assert.rejects(
      moveShard(config, shard, 'b', {
        verify,
        cutoverTimeoutMs: 1000,
        afterStep: async (step) => {
          if (step !== 'synced') return;
          await withClient(b, async (c) => {
            await c.query("SET session_replication_role = 'replica'");
            await c.query(`UPDATE "${schema}".items SET note = 'corrupted' WHERE n = 42`);
          });
        },
      }),
      (e) =>
        isShardflakeError(e, 'MOVE_FAILED') &&
        /rolled back.*items: same row count \(5000\) but different contents/.test(e.message),
      verify,
    );
    assert.deepEqual(await placement(config, shard), { server: 'a', state: 'active' }, verify);
    assert.equal(await schemaOn(b, schema), false);
    assert.equal(await countRows(a, schema), 5000);
  }
  assert.deepEqual(await replicationLeftovers(a), []);
  assert.deepEqual(await replicationLeftovers(b), []);

  // A snapshots move with a writer going through the router.
  const router = await createRouter(config);
  const acked: bigint[] = [];
  let stop = false;
  const writer = (async () => {
    while (!stop) acked.push(await router.insert('items', { note: 'live' }, { shard: 1 }));
  })();
  await sleep(200);
  const result = await moveShard(config, 1, 'b', { verify: 'snapshots' });
  await sleep(200);
  stop = true;
  await writer;
  await router.close();
  assert.equal(result.verify, 'snapshots');
  assert.ok(result.snapshotPauseMs !== null);
  const onB = await withClient(b, async (c) => {
    const { rows } = await c.query(`SELECT id FROM "${shardSchema(config, 1)}".items WHERE note = 'live'`);
    return new Set(rows.map((r: { id: bigint }) => r.id));
  });
  assert.equal(onB.size, acked.length);
  for (const id of acked) assert.ok(onB.has(id));
});

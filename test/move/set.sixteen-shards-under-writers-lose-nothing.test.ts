import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { moveShards } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { useServers } from '../support/postgres.js';
import { makeCluster, placement, replicationLeftovers, withClient } from './fixture.js';

/**
 * The race: one router writer per shard keeps inserting while the whole set copies (at one snapshot), catches up on
 * one stream and cuts over in groups. An insert acknowledged by the source after the snapshot must arrive through
 * the stream; one that reaches a fenced copy must be retried by the router on the target; none may be lost or
 * doubled, and ids issued on the target must be above every id the source issued. With `verify: 'snapshots'` the
 * pause checks no rows at all, only that the target applied a barrier committed after the lock: a barrier that
 * did not cover every acknowledged insert would lose rows here.
 */
test('a set of 16 shards moves in one go (one stream) under a writer per shard: 0 lost acknowledged rows, every old copy fenced, ids keep increasing, nothing left behind', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 32);
  const shards = Array.from({ length: 16 }, (_, i) => i); // init puts shards 0–15 of 32 on server a
  for (const shard of shards) assert.equal((await placement(config, shard)).server, 'a');
  await withClient(config.servers.a as string, async (c) => {
    for (const shard of shards) {
      await c.query(
        `INSERT INTO "${shardSchema(config, shard)}".items (note, n) SELECT 'bulk', g FROM generate_series(1, 300) g`,
      );
    }
  });

  const router = await createRouter(config);
  let stop = false;
  const acknowledged = new Map<number, bigint[]>(shards.map((s) => [s, []]));
  const writers = shards.map(async (shard) => {
    for (let i = 0; !stop; i++) {
      const id = await router.insert('items', { note: 'live', n: i }, { shard });
      acknowledged.get(shard)?.push(id);
    }
  });
  let groups = 0;
  const results = await moveShards(config, shards, 'b', {
    // Small groups so that the set really cuts over in several pauses while the writers go on; checksums on
    // pinned snapshots, and inside each pause only the barrier (the path with the least checking in the pause).
    cutoverGroupShards: 4,
    verify: 'snapshots',
    onSetProgress: (p) => {
      if (p.phase === 'switching') groups++;
    },
  });
  stop = true;
  await Promise.all(writers);
  await router.close();

  assert.equal(groups, 4, 'cut over in 4 groups of 4');
  assert.equal(new Set(results.map((r) => r.batchId)).size, 1, 'all 16 shards moved as one set');
  assert.ok(results.every((r) => r.verify === 'snapshots' && r.snapshotPauseMs !== null));
  for (const shard of shards) {
    assert.deepEqual(await placement(config, shard), { server: 'b', state: 'active' });
    const schema = shardSchema(config, shard);
    const ids = acknowledged.get(shard) as bigint[];
    assert.ok(ids.length > 0, `shard ${shard}'s writer got some inserts through`);
    const onTarget = await withClient(config.servers.b as string, async (c) => {
      const { rows } = await c.query(`SELECT id FROM "${schema}".items WHERE note = 'live' ORDER BY id`);
      return rows.map((r: { id: bigint }) => r.id);
    });
    assert.deepEqual(
      onTarget,
      [...ids].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)),
      `shard ${shard}: every acknowledged row on the target, none extra`,
    );
    // Ids in acknowledgement order only go up, across the cutover.
    for (let i = 1; i < ids.length; i++) assert.ok((ids[i] as bigint) > (ids[i - 1] as bigint));
    const bulk = await withClient(config.servers.b as string, async (c) => {
      const { rows } = await c.query(`SELECT count(*)::int AS n FROM "${schema}".items WHERE note = 'bulk'`);
      return (rows[0] as { n: number }).n;
    });
    assert.equal(bulk, 300, `shard ${shard}: the bulk rows were copied`);
    await withClient(config.servers.a as string, async (c) => {
      await assert.rejects(
        c.query(`INSERT INTO "${schema}".items (note) VALUES ('stale')`),
        (e: { code?: string }) => e.code === 'SF001',
        `shard ${shard}'s old copy is fenced`,
      );
    });
  }
  for (const url of Object.values(config.servers)) assert.deepEqual(await replicationLeftovers(url), []);
});

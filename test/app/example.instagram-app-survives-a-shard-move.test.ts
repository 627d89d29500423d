import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRouter, type RouterEvent, type ShardflakeId } from 'shardflake';
import { adminReport } from '../../examples/instagram/admin.js';
import { InstagramApp } from '../../examples/instagram/app.js';
import { TABLES } from '../../examples/instagram/schema.js';
import { runWorkload } from '../../examples/instagram/workload.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);

test('the example app (Kysely on shard sessions) runs its workload through a shard move: no error reaches it, no write is lost or doubled', async () => {
  const config = testConfig(servers, { logicalShards: 8, tables: TABLES });
  await initCluster(config);
  const events: RouterEvent[] = [];
  const router = await createRouter(config, { onEvent: (e) => events.push(e) });
  const app = new InstagramApp(router);
  // The shard of the first user, who posts and is liked the most: moved when half of the requests are done.
  const shard = router.shardFor('user0');
  const from = router.placement(shard).server;
  const to = from === 'a' ? 'b' : 'a';
  let movedAt = 0;
  const result = await runWorkload(app, {
    users: 24,
    requests: 800,
    workers: 8,
    halfway: async () => {
      await moveShard(config, shard, to);
      movedAt = performance.now();
    },
  });
  assert.ok(movedAt > 0 && movedAt < result.endedAt, 'requests kept running after the move finished');
  assert.deepEqual(result.errors, [], 'no error reached the application');
  assert.ok(result.requests >= 800);
  assert.equal(router.placement(shard).server, to);

  // Every acknowledged photo is there once, and every user's counter matches their photos.
  const photos = await router.queryByShard<{ id: ShardflakeId; user_id: ShardflakeId; like_count: number }>({
    sql: (t) => `SELECT id, user_id, like_count FROM ${t('photos')}`,
  });
  const users = await router.queryByShard<{ id: ShardflakeId; photo_count: number }>({
    sql: (t) => `SELECT id, photo_count FROM ${t('users')}`,
  });
  const likes = await router.queryByShard<{ photo_id: ShardflakeId; n: number }>({
    sql: (t) => `SELECT photo_id, count(*)::int AS n FROM ${t('likes')} GROUP BY photo_id`,
  });
  const stored = [...photos.values()].flat();
  const acknowledged = [...result.photosOf.values()].flat();
  assert.deepEqual(
    stored.map((p) => p.id).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    [...acknowledged].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
  );
  const userRows = [...users.values()].flat();
  assert.equal(userRows.length, 24);
  for (const u of userRows)
    assert.equal(u.photo_count, result.photosOf.get(u.id)?.length, `photo_count of user ${u.id}`);
  // Every acknowledged like is there once; each photo's counter equals its likes.
  const likeRows = new Map([...likes.values()].flat().map((l) => [l.photo_id, l.n]));
  for (const p of stored) {
    assert.equal(p.like_count, likeRows.get(p.id) ?? 0, `like_count of photo ${p.id}`);
    assert.equal(p.like_count, result.likesOf.get(p.id) ?? 0, `acknowledged likes of photo ${p.id}`);
  }
  // Photos stayed on their user's shard, the moved one included.
  for (const p of stored) assert.equal(router.shardOfId(p.id), router.shardOfId(p.user_id));
  assert.ok(stored.some((p) => router.shardOfId(p.id) === shard));

  // The admin page's cross-shard aggregates (router.sql) agree with what the workload was acknowledged.
  const report = await adminReport(router, 3);
  const likesOf = (user: bigint) =>
    stored.filter((p) => p.user_id === user).reduce((n, p) => n + BigInt(p.like_count as number), 0n);
  assert.equal(report.totals.users, 24n);
  assert.equal(report.totals.photos, BigInt(acknowledged.length));
  assert.equal(
    report.totals.posters,
    BigInt([...result.photosOf.values()].filter((l) => l.length > 0).length),
  );
  assert.equal(
    report.totals.likes,
    stored.reduce((n, p) => n + BigInt(p.like_count as number), 0n),
  );
  assert.equal(report.totals.mostLiked, Math.max(...stored.map((p) => p.like_count as number)));
  const expectedTop = [...result.photosOf.entries()]
    .filter(([, list]) => list.length > 0)
    .map(([id, list]) => ({ id, photos: BigInt(list.length), likes: likesOf(id) }))
    .sort((a, b) => (a.likes === b.likes ? 0 : a.likes > b.likes ? -1 : 1))
    .slice(0, 3);
  assert.deepEqual(
    report.topPosters.map((t) => t.likes),
    expectedTop.map((t) => t.likes),
  );
  // Users were created in order as user0, user1 …: each top poster's photos are the ones acknowledged for them.
  const ids = [...result.photosOf.keys()];
  for (const t of report.topPosters) {
    const id = ids[Number(t.name.slice('user'.length))] as ShardflakeId;
    assert.equal(t.photos, BigInt(result.photosOf.get(id)?.length ?? -1), `photos of ${t.name}`);
    assert.equal(t.likes, likesOf(id), `likes of ${t.name}`);
  }
  await router.close();
});

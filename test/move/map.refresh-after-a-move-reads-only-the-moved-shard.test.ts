import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { moveShard, moveShards } from '../../packages/shardflake/src/move/move.js';
import { createRouter, type Router } from '../../packages/shardflake/src/router/router.js';
import type { MapEvent } from '../../packages/shardflake/src/telemetry/events.js';
import { useServers } from '../support/postgres.js';
import { rawConfig, sleep, withClient } from './fixture.js';

/**
 * Issue 33, item 4: every router re-read the whole shard map on every map version (384 KB at 8,192 shards, and a
 * 4,096-shard rebalance made 108 versions). Now each writer stamps the rows it changes with the version it raises
 * (shards.changed_in_version) and a router reads only the rows above its own version. Proved here on real servers:
 * after a move of one shard the router's refreshes read that one row and route to the new place; and after a
 * series of inits and moves the patched map equals a full re-read.
 */
const servers = await useServers(2);
const config = validateConfig(rawConfig(servers, 16), 'test config');
const catalogUrl = (servers[0] as (typeof servers)[0]).url;

function recordingRouter(): Promise<{ router: Router; maps: MapEvent[] }> {
  const maps: MapEvent[] = [];
  return createRouter(config, {
    onEvent: (event) => {
      if (event.type === 'map') maps.push(event);
    },
  }).then((router) => ({ router, maps }));
}

async function catalogVersion(): Promise<bigint> {
  return withClient(catalogUrl, async (c) => (await readShardMap(c)).version);
}

async function caughtUp(router: Router): Promise<void> {
  const version = await catalogVersion();
  for (let i = 0; router.mapVersion < version; i++) {
    if (i > 250) throw new Error(`router at map version ${router.mapVersion}, catalog at ${version}`);
    await sleep(20);
  }
}

/** The router's placements against a full re-read of the catalog's map. */
async function assertSameAsFullRead(router: Router, step: string): Promise<void> {
  await caughtUp(router);
  const full = await withClient(catalogUrl, (c) => readShardMap(c));
  assert.equal(router.mapVersion, full.version, step);
  assert.equal(full.shards.length, 16, step);
  for (const p of full.shards) assert.deepEqual(router.placement(p.shard), p, `${step}: shard ${p.shard}`);
}

// A router that watched the cluster from an interrupted init on; started before the test's moves.
let watcher: { router: Router; maps: MapEvent[] };

test('an init stopped half-way, then finished, then moves: the patched map equals a full re-read after each step', async () => {
  const stop = new AbortController();
  await assert.rejects(
    initCluster(config, {
      batchSize: 2,
      connectionsPerServer: 1,
      signal: stop.signal,
      onProgress: (done) => {
        if (done >= 4) stop.abort();
      },
    }),
  );
  watcher = await recordingRouter();
  const recordedBefore = (await withClient(catalogUrl, (c) => readShardMap(c))).shards.length;
  assert.ok(recordedBefore > 0 && recordedBefore < 16, `the first run recorded ${recordedBefore} shards`);

  // The rerun announces the shards both runs recorded (the first run's were never announced).
  await initCluster(config);
  await assertSameAsFullRead(watcher.router, 'after init');
  const afterInit = watcher.maps.at(-1);
  assert.equal(afterInit?.read, 'changes');
  assert.equal(afterInit?.shardRows, 16, "the rerun announced all 16 shards, the first run's too");

  await moveShards(config, [3, 4], 'b');
  await assertSameAsFullRead(watcher.router, 'after moving 3 and 4 to b');
  await moveShard(config, 12, 'a');
  await assertSameAsFullRead(watcher.router, 'after moving 12 to a');
  await moveShards(config, [0, 1, 2], 'b');
  await assertSameAsFullRead(watcher.router, 'after moving 0, 1 and 2 to b');
  for (const m of watcher.maps.slice(1)) assert.equal(m.read, 'changes', `map version ${m.version}`);
});

test("after a move of one shard, each refresh reads that shard's row alone and the router routes to its new place", async () => {
  const { router, maps } = watcher;
  const shard = 9;
  const from = router.placement(shard).server;
  const to = from === 'a' ? 'b' : 'a';
  const before = router.mapVersion;
  const id = await router.insert('items', { note: 'before the move' }, { shard });
  await moveShard(config, shard, to);
  await caughtUp(router);
  const refreshes = maps.filter((m) => m.version > before);
  assert.ok(refreshes.length >= 1);
  for (const m of refreshes) {
    assert.equal(m.read, 'changes', `map version ${m.version}`);
    assert.equal(m.shardRows, 1, `map version ${m.version} read ${m.shardRows} shard rows`);
  }
  assert.equal(router.placement(shard).server, to);
  assert.equal((await router.get<{ note: string }>('items', id))?.note, 'before the move');
  const after = await router.insert('items', { note: 'after the move' }, { shard });
  const url = (servers.find((s) => s.name === to) as (typeof servers)[0]).url;
  const onTarget = await withClient(url, async (c) => {
    const { rows } = await c.query(`SELECT id FROM "${shardSchema(config, shard)}".items WHERE id = $1`, [
      after,
    ]);
    return rows.length;
  });
  assert.equal(onTarget, 1, 'the write after the move landed on the new server');
  await router.close();
});

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { createRouter, isShardflakeError, type RouterEvent } from 'shardflake';
import { type EmbeddedServer, startEmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { bumpMapVersion } from '../../packages/shardflake/src/catalog/shards.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';

const dir = await mkdtemp(join(tmpdir(), 'shardflake-catalog-outage-'));
// The catalog server keeps its data folder, so it can be started again on the same folder and port.
let [catalog, other] = (await Promise.all([
  startEmbeddedServer('a', { dir, persistent: true }),
  startEmbeddedServer('b'),
])) as [EmbeddedServer, EmbeddedServer];
after(async () => {
  await Promise.all([catalog.stop(), other.stop()]);
  await rm(dir, { recursive: true, force: true });
});

const until = async (check: () => boolean, what: string, ms = 20_000) => {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`${what}: not reached in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

test('the catalog server stopped and restarted under a running router: shards of the other server keep working, the router catches up by itself', async () => {
  const config = testConfig([catalog, other], { logicalShards: 8 });
  await initCluster(config);
  const events: RouterEvent[] = [];
  const router = await createRouter(config, { catalogRetryMs: 100, onEvent: (e) => events.push(e) });
  const onOther = [...Array(8).keys()].filter((s) => router.placement(s).server === 'b');
  assert.ok(onOther.length > 0);

  // A steady load on the other server's shards, through the whole outage: inserts, reads and sessions.
  let stop = false;
  let ok = 0;
  const failures: unknown[] = [];
  const load = (async () => {
    for (let i = 0; !stop; i++) {
      const shard = onOther[i % onOther.length] as number;
      try {
        const id = await router.insert('photos', { user_id: i, caption: 'during' }, { shard });
        assert.equal((await router.get('photos', id))?.caption, 'during');
        await router.withShard({ shard }, (s) =>
          s.query('UPDATE photos SET caption = $1 WHERE id = $2', ['seen', id]),
        );
        ok++;
      } catch (error) {
        failures.push(error);
      }
    }
  })();

  await until(() => ok > 20, 'load running');
  await catalog.stop();
  await until(() => events.some((e) => e.type === 'catalog-down'), 'catalog-down reported');
  assert.equal(router.catalogDown, true);
  const okAtDown = ok;
  await until(() => ok > okAtDown + 50, 'load served from the last map');

  // Commands that change the map refuse to run without the catalog.
  await assert.rejects(moveShard(config, onOther[0] as number, 'a'), (e: unknown) =>
    isShardflakeError(e, 'SERVER_UNREACHABLE'),
  );
  // An explicit refresh says the catalog is down; the map stays.
  await assert.rejects(router.refresh(), (e: unknown) => isShardflakeError(e, 'SERVER_UNREACHABLE'));
  assert.equal(router.placement(onOther[0] as number).server, 'b');

  catalog = await startEmbeddedServer('a', { dir, persistent: true, port: catalog.port });
  await until(() => events.some((e) => e.type === 'catalog-up'), 'catalog-up reported');
  assert.equal(router.catalogDown, false);
  const okAtUp = ok;
  await until(() => ok > okAtUp + 20, 'load after the outage');
  stop = true;
  await load;
  assert.deepEqual(failures, [], 'no operation on the other server failed');

  // The router listens again: a map change made now reaches it without a call to refresh().
  const before = router.mapVersion;
  const c = await connect(catalog.url);
  await c.query('BEGIN');
  const version = await bumpMapVersion(c);
  await c.query('COMMIT');
  await c.end();
  await until(() => router.mapVersion === version, 'new map version heard');
  assert.ok(version > before);
  assert.ok(events.some((e) => e.type === 'map' && e.version === version && e.previous === before));
  const kinds = events.filter((e) => e.type === 'catalog-down' || e.type === 'catalog-up').map((e) => e.type);
  assert.deepEqual(kinds, ['catalog-down', 'catalog-up']);
  await router.close();
});

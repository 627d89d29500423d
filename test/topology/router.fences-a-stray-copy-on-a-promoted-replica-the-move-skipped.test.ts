import assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { readPostmaster } from '../../packages/embedded/src/postmaster.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isFenced, unfenceSql } from '../../packages/shardflake/src/fence/fence.js';
import { lockShard, unlockShard } from '../../packages/shardflake/src/fence/shard-lock.js';
import { checkNode } from '../../packages/shardflake/src/fence/strays.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import type { RouterEvent } from '../../packages/shardflake/src/telemetry/events.js';
import { sqlRows, useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';

/**
 * Issue 21, item 1 (second half): a node the move does not wait for never serves an unfenced old copy of a switched
 * shard. Server a has a streaming replica; it is cut off (WAL receiver stopped) and declared out of the move
 * (--skip-replica host:port, as a config that does not list it), a shard moves a → b, a is killed -9 and the
 * replica promoted: it
 * holds the moved shard's old copy without the fence. A router whose config names the promoted node as a fences
 * that copy before it serves anything (fence/strays.ts), and leaves the shards whose home it is alone.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const replica = await startReplica(a);
const TABLES = { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL)' };

/** Whether an insert into the copy succeeds (tried in a transaction that is rolled back). */
async function writable(url: string, schema: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('BEGIN');
    return await client.query(`INSERT INTO "${schema}".items (note) VALUES ('probe')`).then(
      () => true,
      (e: { code?: string }) => {
        assert.equal(e.code, 'SF001', 'a refused write is refused by the fence');
        return false;
      },
    );
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    await client.end();
  }
}

test('a router fences the unfenced old copy of a moved shard on a promoted replica the move did not wait for (declared out by host:port), before it serves anything, and leaves the shards at home there alone; a shard whose move holds its lock is left to the move', async () => {
  const config = validateConfig(
    { catalog: 'b', logicalShards: 4, servers: { a: [a.url, replica.url], b: b.url }, tables: TABLES },
    'test config',
  );
  await initCluster(config);
  const catalog = new pg.Client({ connectionString: b.url });
  await catalog.connect();
  try {
    const onA = (await readShardMap(catalog)).shards.filter((s) => s.server === 'a').map((s) => s.shard);
    const [moved, stays] = onA as [number, number];
    for (const shard of [moved, stays])
      await sqlRows(
        a.url,
        `INSERT INTO "${shardSchema(config, shard)}".items (note) SELECT 'r' FROM generate_series(1, 50)`,
      );
    await caughtUp(a, replica);

    // The replica is cut off, the shard moves, the primary is killed and the replica promoted.
    await sqlRows(replica.url, "ALTER SYSTEM SET primary_conninfo = ''");
    await sqlRows(replica.url, 'SELECT pg_reload_conf()');
    for (let i = 0; i < 100 && (await sqlRows(a.url, 'SELECT 1 FROM pg_stat_replication')).length > 0; i++)
      await new Promise((r) => setTimeout(r, 50));
    // Declared out as the move's message names it (host:port): the move does not wait for it.
    await moveShard(config, moved, 'b', { skipReplicas: [`127.0.0.1:${replica.port}`] });
    const postmaster = await readPostmaster(a.dataDir);
    assert.ok(postmaster);
    process.kill(postmaster.pid, 'SIGKILL');
    await replica.promote();
    const schema = shardSchema(config, moved);
    assert.equal(await writable(replica.url, schema), true, 'the promoted node has the old copy, writable');

    const after = validateConfig(
      { catalog: 'b', logicalShards: 4, servers: { a: replica.url, b: b.url }, tables: TABLES },
      'config after the failover',
    );
    const events: RouterEvent[] = [];
    const router = await createRouter(after, { onEvent: (e) => events.push(e) });
    try {
      assert.equal(await writable(replica.url, schema), false, 'fenced once the router started');
      assert.deepEqual(
        events.filter((e) => e.type === 'stray-fenced').map((e) => [e.type, e.server, e.shards]),
        [['stray-fenced', 'a', [moved]]],
        'and it said so',
      );
      assert.equal(await writable(replica.url, shardSchema(config, stays)), true, 'its home shard is not');
      const id = await router.insert('items', { note: 'after' }, { shard: moved });
      assert.equal((await router.get('items', id))?.note, 'after');
      assert.equal(router.placement(moved).server, 'b');
      await router.insert('items', { note: 'at home on the promoted node' }, { shard: stays });
    } finally {
      await router.close();
    }

    // The check leaves a shard whose lock is held (a move of it running) to that move, and fences it once free.
    const node = new pg.Client({ connectionString: replica.url });
    await node.connect();
    const reader = new pg.Client({ connectionString: b.url });
    await reader.connect();
    try {
      await node.query(unfenceSql(schema));
      const strays = {
        reader,
        logicalShards: 4,
        connect: async () => {
          const c = new pg.Client({ connectionString: b.url });
          await c.connect();
          return c;
        },
      };
      await lockShard(catalog, moved);
      assert.deepEqual(await checkNode(node, 'a', config.schemaPrefix, strays), {
        fenced: [],
        busy: [moved],
      });
      assert.equal(await isFenced(node, schema), false);
      await unlockShard(catalog, moved);
      assert.deepEqual(await checkNode(node, 'a', config.schemaPrefix, strays), {
        fenced: [{ shard: moved, schema, home: 'b' }],
        busy: [],
      });
      assert.equal(await isFenced(node, schema), true);
    } finally {
      await node.end();
      await reader.end();
    }
  } finally {
    await catalog.end();
  }
});

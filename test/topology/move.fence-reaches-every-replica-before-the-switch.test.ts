import assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import {
  type ClusterConfig,
  shardSchema,
  validateConfig,
} from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { FENCE_FUNCTION } from '../../packages/shardflake/src/fence/fence.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { sqlRows, useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';

/**
 * Issue 21, item 1: the fence must reach the source's replicas before the catalog switches. Server a has a
 * streaming replica; the catalog lives on b. The replica's WAL receiver is then stopped (its walsender gone, as
 * when the link to a replica breaks), a move is tried, the primary is stopped and the replica promoted: every shard
 * must have exactly one writable copy, and every acknowledged row must be in its shard's home.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const replica = await startReplica(a);

async function fenced(url: string, schema: string): Promise<boolean> {
  const rows = await sqlRows<{ n: number }>(
    url,
    `SELECT count(*)::int AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = '${schema}' AND p.proname = '${FENCE_FUNCTION}'`,
  );
  return (rows[0]?.n ?? 0) > 0;
}

/** Nodes on which an insert into the shard's copy succeeds (tried in a transaction that is rolled back). */
async function writableOn(nodes: Record<string, string>, schema: string): Promise<string[]> {
  const writable: string[] = [];
  for (const [name, url] of Object.entries(nodes)) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const there = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
      if (there.rowCount === 0) continue;
      await client.query('BEGIN');
      const ok = await client.query(`INSERT INTO "${schema}".items (note) VALUES ('probe')`).then(
        () => true,
        (e: { code?: string }) => {
          assert.equal(e.code, 'SF001', `a refused write on ${name} is refused by the fence`);
          return false;
        },
      );
      await client.query('ROLLBACK');
      if (ok) writable.push(name);
    } finally {
      await client.end();
    }
  }
  return writable;
}

test('a move waits for the replicas to replay the fence before switching; with a replica cut off it rolls back within the bound instead, and after the primary dies and the replica is promoted every shard has one writable copy and every acknowledged row', async () => {
  const config: ClusterConfig = validateConfig(
    {
      catalog: 'b',
      logicalShards: 4,
      servers: { a: [a.url, replica.url], b: b.url },
      tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL)' },
    },
    'test config',
  );
  await initCluster(config);
  const catalog = new pg.Client({ connectionString: b.url });
  await catalog.connect();
  const onA = (await readShardMap(catalog)).shards.filter((s) => s.server === 'a').map((s) => s.shard);
  await catalog.end();
  assert.ok(onA.length >= 2, `shards on a: ${onA}`);
  const [streamed, cutOff] = onA as [number, number];

  const router = await createRouter(config);
  const acked = new Map<number, Awaited<ReturnType<typeof router.insertMany>>>();
  for (const shard of [streamed, cutOff]) {
    acked.set(
      shard,
      await router.insertMany(
        'items',
        Array.from({ length: 200 }, (_, i) => ({ note: `r${i}` })),
        { shard },
      ),
    );
  }
  await caughtUp(a, replica);

  // 1. Replica streaming: the move waits for it, so the replica holds the fence the moment the move returns.
  const moved = await moveShard(config, streamed, 'b');
  assert.equal(
    await fenced(replica.url, shardSchema(config, streamed)),
    true,
    'the replica has the fence at once',
  );
  assert.ok(
    moved.pauseSteps.replicas !== undefined,
    `the pause names the replica wait: ${JSON.stringify(moved.pauseSteps)}`,
  );

  // 2. The replica's WAL receiver stopped (primary_conninfo emptied): it falls behind from here on.
  const [setting] = await sqlRows<{ primary_conninfo: string }>(replica.url, 'SHOW primary_conninfo');
  assert.ok(setting?.primary_conninfo, 'the replica streams through primary_conninfo');
  await sqlRows(replica.url, "ALTER SYSTEM SET primary_conninfo = ''");
  await sqlRows(replica.url, 'SELECT pg_reload_conf()');
  for (let i = 0; i < 100; i++) {
    const [row] = await sqlRows<{ n: number }>(a.url, 'SELECT count(*)::int AS n FROM pg_stat_replication');
    if (row?.n === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.deepEqual(
    await sqlRows(a.url, 'SELECT pid FROM pg_stat_replication'),
    [],
    'no walsender to the replica',
  );

  const started = performance.now();
  await assert.rejects(
    moveShard(config, cutOff, 'b', { replicaFenceTimeoutMs: 1500 }),
    (e: unknown) =>
      isShardflakeError(e, 'MOVE_FAILED') &&
      /failed and was rolled back \(shard \d+ stays on server a\): replica .* has not replayed the fence within 1500 ms/.test(
        e.message,
      ),
  );
  const tookMs = performance.now() - started;
  const schema = shardSchema(config, cutOff);
  assert.deepEqual(
    await writableOn({ a: a.url, b: b.url }, schema),
    ['a'],
    'rolled back: the source is the one writable copy',
  );
  assert.equal(router.placement(cutOff).server, 'a');

  // 3. The primary dies; the replica, behind every fence and unfence of step 2, is promoted.
  await a.stop();
  await replica.promote();
  const after = validateConfig(
    {
      catalog: 'b',
      logicalShards: 4,
      servers: { a: [replica.url], b: b.url },
      tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL)' },
    },
    'test config after the failover',
  );
  const nodes = { 'a (promoted)': replica.url, b: b.url };
  assert.deepEqual(
    await writableOn(nodes, shardSchema(config, streamed)),
    ['b'],
    'the moved shard: only its new home',
  );
  assert.deepEqual(
    await writableOn(nodes, schema),
    ['a (promoted)'],
    'the shard whose move rolled back: only a',
  );
  const router2 = await createRouter(after);
  try {
    for (const [shard, ids] of acked) {
      for (const id of ids)
        assert.equal((await router2.get('items', id))?.id, id, `acknowledged row ${id} of shard ${shard}`);
      const id = await router2.insert('items', { note: 'after the failover' }, { shard });
      assert.equal((await router2.get('items', id))?.note, 'after the failover');
    }
  } finally {
    await router2.close();
    await router.close();
  }
  process.stdout.write(
    `# rolled back after ${Math.round(tookMs)} ms with a replica cut off; streamed move paused ${Math.round(moved.pauseMs ?? 0)} ms (replica wait ${moved.pauseSteps.replicas} ms)\n`,
  );
});

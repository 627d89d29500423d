import assert from 'node:assert/strict';
import { test } from 'node:test';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { useServers } from '../support/postgres.js';
import { makeCluster, placement, rawConfig, replicationLeftovers, schemaOn, withClient } from './fixture.js';

async function mapState(url: string): Promise<{ version: string; moves: number; states: string }> {
  return withClient(url, async (c) => {
    const v = await c.query('SELECT map_version::text AS v FROM shardflake.cluster');
    const m = await c
      .query("SELECT count(*)::int AS n FROM shardflake.moves WHERE phase NOT IN ('done', 'rolled_back')")
      .catch(() => ({ rows: [{ n: 0 }] }));
    const s = await c.query(
      "SELECT string_agg(shard || ':' || server || ':' || state, ',' ORDER BY shard) AS s FROM shardflake.shards",
    );
    return { version: v.rows[0].v, moves: m.rows[0].n, states: s.rows[0].s };
  });
}

const code = (expected: string, pattern?: RegExp) => (e: unknown) =>
  isShardflakeError(e) && e.code === expected && (!pattern || pattern.test(e.message));

test('bad input, a busy shard, a table without a primary key and a target that is down are refused with clear errors and change nothing; a target dying mid-copy rolls the move back; migrations skip the moving shard', async () => {
  const servers = await useServers(3);
  const config = await makeCluster(servers.slice(0, 2), 4);
  // Server c is in the config but will be down.
  const withC = { ...config, servers: { ...config.servers, c: (servers[2] as (typeof servers)[0]).url } };
  const catalogUrl = config.servers.a as string;
  const before = await mapState(catalogUrl);

  await assert.rejects(moveShard(withC, 99, 'b'), code('UNKNOWN_SHARD', /99/));
  await assert.rejects(moveShard(withC, -1, 'b'), code('UNKNOWN_SHARD'));
  await assert.rejects(moveShard(withC, 0, 'zz'), code('UNKNOWN_SERVER', /zz/));
  await assert.rejects(moveShard(withC, 0, 'a'), code('INVALID_ARGUMENT', /already on server a/));

  // A table without a primary key cannot be replicated faithfully: refused before anything starts.
  const schema0 = shardSchema(config, 0);
  await withClient(catalogUrl, (c) => c.query(`CREATE TABLE "${schema0}".nopk (x integer)`));
  await assert.rejects(moveShard(withC, 0, 'b'), code('NOT_SUPPORTED', /nopk has no primary key/));
  await withClient(catalogUrl, (c) => c.query(`DROP TABLE "${schema0}".nopk`));
  assert.deepEqual(await mapState(catalogUrl), before);

  // The target dies in the middle of the copy: the move rolls back, the shard stays served from its old home.
  const c = servers[2] as (typeof servers)[0];
  await withClient(catalogUrl, (client) =>
    client.query(`INSERT INTO "${schema0}".items (note) SELECT 'x' FROM generate_series(1, 2000)`),
  );
  await assert.rejects(
    moveShard(withC, 0, 'c', {
      afterStep: async (step) => {
        if (step === 'subscribed') await c.stop();
      },
    }),
    code('MOVE_FAILED', /failed and was rolled back \(shard 0 stays on server a\)/),
  );
  assert.deepEqual(await placement(config, 0), { server: 'a', state: 'active' });
  assert.deepEqual(await replicationLeftovers(catalogUrl), [], 'no slot or publication left on the source');

  // The target is down from the start: the move fails at once and changes nothing.
  const beforeDown = await mapState(catalogUrl);
  await assert.rejects(moveShard(withC, 0, 'c'), code('SERVER_UNREACHABLE', /server c/));
  assert.deepEqual(await mapState(catalogUrl), beforeDown);
  const router = await createRouter(config);
  const id = await router.insert('items', { note: 'still here' }, { shard: 0 });
  assert.equal((await router.get('items', id))?.note, 'still here');
  await router.close();
  assert.deepEqual(await replicationLeftovers(catalogUrl), []);

  // Two moves of one shard at once: the second is refused while the first runs, and the first completes.
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => {
    release = r;
  });
  let reached: () => void = () => {};
  const atSubscribed = new Promise<void>((r) => {
    reached = r;
  });
  const first = moveShard(config, 1, 'b', {
    afterStep: async (step) => {
      if (step !== 'subscribed') return;
      reached();
      await gate;
    },
  });
  await atSubscribed;
  await assert.rejects(
    moveShard(config, 1, 'b'),
    code(
      'SHARD_BUSY',
      /shard 1 is being moved by another process \(move #\d+ to server b, phase subscribed\)/,
    ),
  );
  await assert.rejects(moveShard(withC, 1, 'c'), code('SHARD_BUSY'));
  // DDL by hand on the moving shard is refused on its server while the move runs.
  await withClient(catalogUrl, async (client) => {
    await assert.rejects(
      client.query(`ALTER TABLE "${shardSchema(config, 1)}".items ADD COLUMN by_hand integer`),
      (e: { code?: string; message?: string }) =>
        e.code === '55006' && /is being moved/.test(e.message ?? ''),
    );
    await client.query(`ALTER TABLE "${shardSchema(config, 0)}".items ADD COLUMN by_hand integer`);
    await client.query(`ALTER TABLE "${shardSchema(config, 0)}".items DROP COLUMN by_hand`);
  });
  // A migration during the move is refused for the moving shard (and applied to the others).
  const migrated = validateConfig(
    {
      ...rawConfig(servers.slice(0, 2), 4),
      migrations: [{ version: 1, name: 'extra', sql: 'ALTER TABLE items ADD COLUMN extra text' }],
    },
    'test config v1',
  );
  const during = await migrateCluster(migrated);
  assert.deepEqual(
    during.failed.map((f) => [f.shard, f.version]),
    [[1, 0]],
  );
  assert.match(during.failed[0]?.error ?? '', /being moved/);
  release();
  const result = await first;
  assert.equal(result.to, 'b');
  assert.deepEqual(await placement(config, 1), { server: 'b', state: 'active' });
  assert.deepEqual(await replicationLeftovers(catalogUrl), [], 'the DDL guard went with the move');
  const after = await migrateCluster(migrated);
  assert.deepEqual(after.failed, []);
  assert.equal(after.migrated, 1, 'the moved shard is migrated on its new server');

  // Moving back while the fenced old copy still sits on a: refused until cleanup.
  assert.equal(await schemaOn(catalogUrl, shardSchema(config, 1)), true);
  await assert.rejects(moveShard(migrated, 1, 'a'), code('INVALID_ARGUMENT', /cluster cleanup/));
  assert.deepEqual(await placement(config, 1), { server: 'b', state: 'active' });
});

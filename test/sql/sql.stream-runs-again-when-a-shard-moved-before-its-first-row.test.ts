import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type pg from 'pg';
import { createRouter, type Router } from 'shardflake';
import { bumpMapVersion } from '../../packages/shardflake/src/cluster/catalog/shards.js';
import { validateConfig } from '../../packages/shardflake/src/cluster/config.js';
import { initCluster } from '../../packages/shardflake/src/cluster/init.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';

/**
 * router.sqlStream on a router whose map is old: a shard was moved to the other server (its copy made there, the
 * catalog pointed at it, the old schema dropped — what a move and its cleanup do) and the router did not hear of it
 * (no LISTEN). Its first attempt finds the schema gone before any row was passed on; it opens every server's
 * stream again on the catalog's new map, as router.sql does, and answers with every row, the moved shard's
 * included, in order.
 */
const [a, b] = await useServers(2);
const config = validateConfig(
  {
    servers: { a: defined(a).url, b: defined(b).url },
    catalog: 'a',
    logicalShards: 4,
    epoch: '2024-01-01T00:00:00Z',
    tables: { notes: 'CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT next_id(), body text NOT NULL)' },
  },
  'test-config',
);
let router: Router;
const admin: Record<string, pg.Client> = {};

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { listen: false, telemetry: false, transactions: { recovery: false } });
  admin.a = await connect(defined(a).url);
  admin.b = await connect(defined(b).url);
});
after(async () => {
  await router?.close();
  await Promise.all(Object.values(admin).map((c) => c.end()));
});

test('sqlStream opens its streams again on the new map when a shard moved before its first row', async () => {
  const ids: bigint[] = [];
  for (let shard = 0; shard < 4; shard++)
    for (let i = 0; i < 3; i++) ids.push(await router.insert('notes', { body: `s${shard}n${i}` }, { shard }));
  const moved = router.placement(0);
  assert.equal(moved.server, 'a');
  const schema = `"${moved.schema}"`;
  // The move, by hand: the copy on b, the catalog pointed at it, the old copy dropped.
  const { rows } = await defined(admin.a).query(`SELECT id, body FROM ${schema}.notes`);
  await defined(admin.b).query(
    `CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.notes (id bigint PRIMARY KEY, body text NOT NULL)`,
  );
  for (const row of rows)
    await defined(admin.b).query(`INSERT INTO ${schema}.notes VALUES ($1, $2)`, [row.id, row.body]);
  await defined(admin.a).query('BEGIN');
  await defined(admin.a).query(`UPDATE shardflake.shards SET server = 'b' WHERE shard = 0`);
  await bumpMapVersion(defined(admin.a));
  await defined(admin.a).query('COMMIT');
  await defined(admin.a).query(`DROP SCHEMA ${schema} CASCADE`);
  assert.equal(router.placement(0).server, 'a', 'the router has not heard of the move');

  const seen: bigint[] = [];
  for await (const row of router.sqlStream('SELECT id FROM notes ORDER BY id', [], { batchSize: 2 }))
    seen.push(row.id as bigint);
  assert.deepEqual(
    seen,
    [...ids].sort((x, y) => (x < y ? -1 : 1)),
  );
  assert.equal(router.placement(0).server, 'b');
});

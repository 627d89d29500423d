import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ShardflakeId } from 'shardflake';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { useServers } from '../support/postgres.js';
import { countRows, makeCluster, placement, replicationLeftovers, sleep, withClient } from './fixture.js';

const BIG = 200_000;

test('a shard with 200,000 rows moves while a router writer inserts and a direct writer inserts, updates and deletes: every acknowledged change arrives, the old copy refuses writes, ids keep increasing', async () => {
  const servers = await useServers(2);
  const [a, b] = servers as [(typeof servers)[0], (typeof servers)[0]];
  const config = await makeCluster(servers, 4);
  const shard = 0;
  const schema = shardSchema(config, shard);
  assert.equal((await placement(config, shard)).server, 'a');
  await withClient(a.url, (c) =>
    c.query(
      `INSERT INTO "${schema}".items (note, n) SELECT 'bulk ' || g, g FROM generate_series(1, ${BIG}) g`,
    ),
  );

  const router = await createRouter(config);
  const direct = await connect(a.url);
  let stop = false;
  const routerIds: ShardflakeId[] = [];
  const directIds: bigint[] = [];
  let directError: { code?: string } | undefined;

  const routerWriter = (async () => {
    for (let i = 0; !stop; i++)
      routerIds.push(await router.insert('items', { note: 'router', n: i }, { shard }));
  })();
  // A stale client that keeps writing straight to the old server until the fence stops it: it inserts, and
  // updates and deletes rows of the bulk load, so the copy must carry all three kinds of change.
  const bulkIds = await withClient(a.url, async (c) => {
    const { rows } = await c.query(`SELECT id FROM "${schema}".items ORDER BY id LIMIT 20000`);
    return rows.map((r: { id: bigint }) => r.id);
  });
  const updatedIds: bigint[] = [];
  const deletedIds: bigint[] = [];
  const directWriter = (async () => {
    for (let i = 0; !stop; i++) {
      try {
        const { rows } = await direct.query(
          `INSERT INTO "${schema}".items (note, n) VALUES ('direct', $1) RETURNING id`,
          [i],
        );
        directIds.push((rows[0] as { id: bigint }).id);
        const updated = bulkIds[2 * i] as bigint;
        await direct.query(`UPDATE "${schema}".items SET note = 'updated', n = -n WHERE id = $1`, [updated]);
        updatedIds.push(updated);
        const deleted = bulkIds[2 * i + 1] as bigint;
        await direct.query(`DELETE FROM "${schema}".items WHERE id = $1`, [deleted]);
        deletedIds.push(deleted);
      } catch (error) {
        directError = error as { code?: string };
        return;
      }
    }
  })();

  await sleep(300);
  const result = await moveShard(config, shard, 'b');
  const routerIdsAtSwitch = routerIds.length;
  await sleep(300);
  stop = true;
  await Promise.all([routerWriter, directWriter]);

  assert.equal(result.from, 'a');
  assert.equal(result.to, 'b');
  assert.ok(result.rows >= BigInt(BIG), `verified ${result.rows} rows`);
  assert.deepEqual(await placement(config, shard), { server: 'b', state: 'active' });
  assert.ok(routerIds.length > routerIdsAtSwitch, 'the router writer kept inserting after the move');
  assert.ok(directIds.length > 0, 'the direct writer wrote before the cutover');
  assert.equal(directError?.code, 'SF001', 'the direct writer was stopped by the fence');

  // The new copy holds exactly the old copy's rows (same contents: inserts, updates and deletes all arrived)
  // plus the router's rows written after the switch; every acknowledged write is there.
  const rowsOf = (url: string) =>
    withClient(url, async (c) => {
      const { rows } = await c.query(`SELECT id, hashtext(r::text) AS h FROM "${schema}".items AS r`);
      return new Map(rows.map((r: { id: bigint; h: number }) => [r.id, r.h]));
    });
  const [onA, onB] = await Promise.all([rowsOf(a.url), rowsOf(b.url)]);
  for (const [id, h] of onA) assert.equal(onB.get(id), h, `row ${id} arrived unchanged`);
  const routerSet = new Set<bigint>(routerIds);
  for (const id of onB.keys())
    assert.ok(onA.has(id) || routerSet.has(id), `row ${id} on b came from a or the router`);
  for (const id of [...routerIds, ...directIds, ...updatedIds])
    assert.ok(onB.has(id), `acknowledged id ${id} is on server b`);
  for (const id of deletedIds) assert.equal(onB.has(id), false, `deleted id ${id} stays deleted`);
  assert.ok(updatedIds.length > 0 && deletedIds.length > 0);
  assert.equal(onB.size, BIG + routerIds.length + directIds.length - deletedIds.length);
  assert.equal(await countRows(b.url, schema), onB.size);

  // Ids kept increasing across the cutover and kept the shard's bits.
  for (let i = 1; i < routerIds.length; i++) {
    assert.ok((routerIds[i] as bigint) > (routerIds[i - 1] as bigint), `router id ${i} increases`);
  }
  const maxOld = await withClient(
    a.url,
    async (c) => (await c.query(`SELECT max(id) AS m FROM "${schema}".items`)).rows[0].m as bigint,
  );
  assert.ok(
    (routerIds[routerIds.length - 1] as bigint) > maxOld,
    'new ids are above every id of the old copy',
  );
  for (const id of routerIds) assert.equal(router.shardOfId(id), shard);

  // The old copy refuses writes of every kind, and no replication object is left.
  for (const sql of [
    `INSERT INTO "${schema}".items (note) VALUES ('late')`,
    `UPDATE "${schema}".items SET n = 0 WHERE id = ${directIds[0]}`,
    `DELETE FROM "${schema}".items WHERE id = ${directIds[0]}`,
    `TRUNCATE "${schema}".items`,
  ]) {
    await assert.rejects(direct.query(sql), (e: { code?: string }) => e.code === 'SF001', sql);
  }
  assert.deepEqual(await replicationLeftovers(a.url), []);
  assert.deepEqual(await replicationLeftovers(b.url), []);

  await direct.end();
  await router.close();
});

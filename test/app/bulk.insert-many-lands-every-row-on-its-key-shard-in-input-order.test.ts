import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { bumpMapVersion } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);
const config = testConfig(servers, { logicalShards: 64 });
let router: Router;

/** Every photos row of every shard, read straight from the servers: id → { shard it is stored in, row }. */
type Stored = { shard: number; id: bigint; user_id: bigint; caption: string };
async function everyRow(): Promise<Map<bigint, Stored>> {
  const found = new Map<bigint, Stored>();
  for (const server of servers) {
    const c = await connect(server.url);
    for (let shard = 0; shard < 64; shard++) {
      if (router.placement(shard).server !== server.name) continue;
      const { rows } = await c.query(
        `SELECT id, user_id, caption FROM "${shardSchema(config, shard)}".photos`,
      );
      for (const r of rows as { id: bigint; user_id: bigint; caption: string }[])
        found.set(r.id, { shard, ...r });
    }
    await c.end();
  }
  return found;
}

before(async () => {
  await initCluster(config);
  router = await createRouter(config);
});
after(async () => {
  await router?.close();
});

describe('insertMany', () => {
  it('10,000 rows over 64 shards: every row on the shard of its key, ids in input order with the right shard bits', async () => {
    // Keys in a shuffled order, so input order differs from shard order.
    const rows = Array.from({ length: 10_000 }, (_, i) => ({
      user_id: BigInt((i * 7919) % 10_007),
      caption: `row ${i}`,
    }));
    const ids = await router.insertMany('photos', rows, { key: (row) => row.user_id });
    assert.equal(ids.length, rows.length);
    const stored = await everyRow();
    assert.equal(stored.size, rows.length);
    ids.forEach((id, i) => {
      const row = rows[i] as (typeof rows)[number];
      const shard = router.shardFor(row.user_id);
      assert.equal(typeof id, 'bigint');
      assert.equal(router.shardOfId(id), shard, `row ${i}: the id's shard bits`);
      assert.deepEqual(stored.get(id), { shard, id, user_id: row.user_id, caption: row.caption }, `row ${i}`);
    });
    assert.equal(new Set(ids).size, ids.length);
    assert.equal(new Set(ids.map((id) => router.shardOfId(id))).size, 64);
    // Within a shard, the ids follow the input order too (next_id() is monotonic in a statement).
    const lastOfShard = new Map<number, bigint>();
    for (const id of ids) {
      const shard = router.shardOfId(id);
      assert.ok((lastOfShard.get(shard) ?? -1n) < id);
      lastOfShard.set(shard, id);
    }
  });

  it('{ shard } puts every row in that shard', async () => {
    const ids = await router.insertMany('photos', [{ user_id: 1n }, { user_id: 2n }], { shard: 9 });
    assert.deepEqual(
      ids.map((id) => router.shardOfId(id)),
      [9, 9],
    );
  });

  it('bad rows fail with one typed error that names the row, and nothing is written', async () => {
    const before = (await everyRow()).size;
    const good = (i: number) => ({ user_id: BigInt(i), caption: `bad batch ${i}` });
    const cases: [string, () => Promise<unknown>, (e: unknown) => boolean][] = [
      [
        'a key that is not a shard key',
        () =>
          router.insertMany('photos', [good(1), good(2), good(3)], {
            key: (r) => (r.user_id === 3n ? ({} as never) : r.user_id),
          }),
        (e) => isShardflakeError(e, 'INVALID_ARGUMENT') && /row 2/.test(e.message),
      ],
      [
        'rows with different columns',
        () => router.insertMany('photos', [good(1), { user_id: 2n }], { key: (r) => r.user_id }),
        (e) => isShardflakeError(e, 'INVALID_ARGUMENT') && /row 1/.test(e.message),
      ],
      [
        'a column that does not exist',
        () => router.insertMany('photos', [{ user_id: 1n, nope: 1 }], { key: (r) => r.user_id }),
        (e) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '42703' && /row 0/.test(e.message),
      ],
      [
        'a table that does not exist',
        () => router.insertMany('nope', [good(1)], { key: (r) => r.user_id }),
        (e) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '42P01',
      ],
      [
        'a hostile column name',
        () => router.insertMany('photos', [{ 'user_id"; --': 1 }], { shard: 1 }),
        (e) => isShardflakeError(e, 'INVALID_IDENTIFIER'),
      ],
      [
        'a shard outside the cluster',
        () => router.insertMany('photos', [good(1)], { shard: 64 }),
        (e) => isShardflakeError(e, 'UNKNOWN_SHARD') && /row 0/.test(e.message),
      ],
      [
        'both key and shard',
        () => router.insertMany('photos', [good(1)], { shard: 1, key: () => 1 } as never),
        (e) => isShardflakeError(e, 'INVALID_ARGUMENT'),
      ],
    ];
    for (const [what, call, check] of cases) await assert.rejects(call(), check, what);
    assert.equal((await everyRow()).size, before);
  });

  it('a row refused by one server rolls back that server only; the error names the rows that did not land', async () => {
    const before = await everyRow();
    const serverOf = (key: bigint) => router.placement(router.shardFor(key)).server;
    const onA = [...Array(200).keys()]
      .map(BigInt)
      .filter((k) => serverOf(k) === 'a')
      .slice(0, 3);
    const onB = [...Array(200).keys()]
      .map(BigInt)
      .filter((k) => serverOf(k) === 'b')
      .slice(0, 3);
    const rows = [
      { user_id: onA[0], caption: 'a0' },
      { user_id: onB[0], caption: 'b0' },
      { user_id: onA[1], caption: 'a1' },
      { user_id: onB[1], caption: null as unknown as string }, // kept; caption may be null
      { user_id: onB[2], caption: 'b2' },
    ];
    // user_id NOT NULL: row 5 fails on server b, so b's rows (1, 3, 4, 5) roll back and a's rows (0, 2) stay.
    const failing = [...rows, { user_id: null as unknown as bigint, caption: 'null user' }];
    await assert.rejects(
      router.insertMany('photos', failing, { key: (r) => r.user_id ?? (onB[0] as bigint) }),
      (e: unknown) =>
        isShardflakeError(e, 'DATABASE_ERROR') &&
        e.sqlState === '23502' &&
        e.detail === 'not written: rows 1, 3, 4, 5; every other row was committed',
    );
    const after = await everyRow();
    const added = [...after.values()].filter((r) => !before.has(r.id)).map((r) => r.caption);
    assert.deepEqual(added.sort(), ['a0', 'a1']);
  });

  it("a shard fenced mid-batch (as a move's cutover does) is retried once the map moves on; every row lands once", async () => {
    const shard = 5;
    const { server, schema } = router.placement(shard);
    const owner = await connect(servers.find((s) => s.name === server)?.url as string);
    const catalog = await connect(servers[0]?.url as string);
    // The fence counts its hits in a sequence (not rolled back with the write), so the test knows when to lift it.
    await owner.query(`CREATE SEQUENCE "${schema}".hits;
      CREATE FUNCTION "${schema}".fenced() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN PERFORM nextval('"${schema}".hits'); RAISE EXCEPTION 'shard moved' USING ERRCODE = 'SF001'; END $$;
      CREATE TRIGGER fence BEFORE INSERT ON "${schema}".photos FOR EACH STATEMENT EXECUTE FUNCTION "${schema}".fenced()`);
    const before = await everyRow();
    const rows = Array.from({ length: 200 }, (_, i) => ({
      user_id: BigInt(i),
      caption: `fenced batch ${i}`,
    }));
    const pending = router.insertMany('photos', rows, { key: (r) => r.user_id });
    while (!(await owner.query(`SELECT is_called FROM "${schema}".hits`)).rows[0]?.is_called)
      await new Promise((r) => setTimeout(r, 10));
    // The "cutover": the fence comes off (as if the shard now lived elsewhere) and the map is bumped.
    await owner.query(`DROP TRIGGER fence ON "${schema}".photos`);
    await catalog.query('BEGIN');
    await bumpMapVersion(catalog);
    await catalog.query('COMMIT');
    const ids = await pending;
    const after = await everyRow();
    assert.equal(after.size, before.size + rows.length, 'every row once, none twice');
    ids.forEach((id, i) => {
      assert.equal(after.get(id)?.caption, `fenced batch ${i}`);
      assert.equal(router.shardOfId(id), router.shardFor(BigInt(i)));
    });
    await Promise.all([owner.end(), catalog.end()]);
  });
});

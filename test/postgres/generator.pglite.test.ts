import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { decodeId, generatorSql, layouts } from 'shardflake';

/*
 * PGlite (PostgreSQL compiled to WebAssembly, one backend in the Node process): the same install SQL, run with
 * exec() because PGlite's query() takes one statement at a time.
 */
test('in PGlite: installs twice, bulk ids unique, increasing in call order, decoded alike in SQL and TypeScript', async () => {
  const db = await PGlite.create();
  try {
    await db.exec(generatorSql({ schema: 'shard_0005', shard: 5 }));
    await db.exec(generatorSql({ schema: 'shard_0005', shard: 5 }));
    await db.exec('CREATE TABLE shard_0005.t (id bigint PRIMARY KEY DEFAULT shard_0005.next_id(), v int)');
    await db.exec('INSERT INTO shard_0005.t (v) SELECT 1 FROM generate_series(1, 100000)');
    const summary = await db.query<{ n: number; d: number; shard_ok: boolean }>(
      `SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, bool_and(shard_0005.id_to_shard(id) = 5) AS shard_ok
       FROM shard_0005.t`,
    );
    assert.deepEqual(summary.rows[0], { n: 100_000, d: 100_000, shard_ok: true });

    const ordered = await db.query<{ increasing: boolean }>(
      `SELECT bool_and(id > prev) AS increasing FROM (
         SELECT id, lag(id) OVER (ORDER BY g) AS prev
         FROM (SELECT g, shard_0005.next_id() AS id FROM generate_series(1, 20000) g) s) w
       WHERE prev IS NOT NULL`,
    );
    assert.equal(ordered.rows[0]?.increasing, true);

    const one = await db.query<{ id: string; ts: Date }>(
      'SELECT id::text AS id, shard_0005.id_to_timestamp(id) AS ts FROM shard_0005.t ORDER BY id DESC LIMIT 1',
    );
    const row = one.rows[0] as { id: string; ts: Date };
    const decoded = decodeId(BigInt(row.id), layouts.instagram);
    assert.equal(decoded.fields.shard, 5);
    assert.equal(decoded.timestamp.getTime(), row.ts.getTime());
    assert.ok(Math.abs(decoded.timestamp.getTime() - Date.now()) < 60_000, 'time bits follow the clock');
  } finally {
    await db.close();
  }
});

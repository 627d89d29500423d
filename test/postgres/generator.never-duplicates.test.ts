import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, layouts } from 'shardflake';
import { decodeId } from '../../packages/shardflake/src/ids/codec.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';
import { sessions, shardWithTable } from './generator-fixture.js';

const ROWS = 1_000_000;

test('bulk statements and concurrent sessions never get a duplicate id, and every id carries its shard', async (t) => {
  const [server] = await useServers(1);
  const url = (server as { url: string }).url;
  const admin = await connect(url);
  const pair = await sessions(url, 3);
  try {
    const table = await shardWithTable(admin, { schema: 'shard_0005', shard: 5 });

    await t.test(
      'three sessions each INSERT … SELECT 1,000,000 rows into the same shard, one naming next_id_bulk(): 3,000,000 rows, no error',
      async () => {
        const bulk = qualified('shard_0005', 'next_id_bulk');
        await Promise.all(
          pair.all.map((c, i) =>
            c.query(
              i === 2
                ? `INSERT INTO ${table} (id, v) SELECT ${bulk}(), ${i} FROM generate_series(1, ${ROWS})`
                : `INSERT INTO ${table} (v) SELECT ${i} FROM generate_series(1, ${ROWS})`,
            ),
          ),
        );
        const { rows } = await admin.query(
          `SELECT count(*)::int AS n, count(DISTINCT id)::int AS distinct_ids,
                count(*) FILTER (WHERE ${qualified('shard_0005', 'id_to_shard')}(id) <> 5)::int AS other_shard
         FROM ${table}`,
        );
        assert.deepEqual(rows[0], { n: 3 * ROWS, distinct_ids: 3 * ROWS, other_shard: 0 });
        // A sample decoded by the TypeScript decoder (the helpers are checked against it in another file).
        const sample = await admin.query(`SELECT id FROM ${table} TABLESAMPLE SYSTEM (1) LIMIT 20000`);
        assert.ok(sample.rows.length > 0);
        for (const { id } of sample.rows)
          assert.equal(decodeId(id as bigint, layouts.instagram).fields.shard, 5);
      },
    );

    await t.test(
      'one SELECT next_id() over 1,000,000 rows: no duplicate, strictly increasing in call order',
      async () => {
        const { rows } = await admin.query(
          `SELECT count(*)::int AS n, count(DISTINCT id)::int AS distinct_ids,
                count(*) FILTER (WHERE id <= prev)::int AS not_increasing,
                (extract(epoch FROM ${qualified('shard_0005', 'id_to_timestamp')}(max(id)) - max(called_at)) * 1000)::float8 AS ahead_ms
         FROM (SELECT id, lag(id) OVER (ORDER BY g) AS prev, called_at
               FROM (SELECT g, ${qualified('shard_0005', 'next_id')}() AS id, clock_timestamp() AS called_at
                     FROM generate_series(1, ${ROWS}) g) calls) ordered`,
        );
        const { n, distinct_ids, not_increasing, ahead_ms } = rows[0];
        assert.deepEqual(
          { n, distinct_ids, not_increasing },
          { n: ROWS, distinct_ids: ROWS, not_increasing: 0 },
        );
        // How far the time bits ran ahead of the clock: at most ROWS / 2^10 ms, 0 when the server is slower than that.
        assert.ok(ahead_ms <= ROWS / 1024, `time bits ran ${ahead_ms} ms ahead`);
        t.diagnostic(
          `time bits ahead of the clock after 1,000,000 ids in one statement: ${Math.max(0, ahead_ms).toFixed(0)} ms`,
        );
      },
    );
  } finally {
    await pair.close();
    await admin.end();
  }
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, GUARD_KINDS } from 'shardflake';
import { qualified } from '../../src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';
import { sessions, setTestClock, shardWithTable } from './generator-fixture.js';

/*
 * The dangerous moment of the generator is the catch-up (the counter jumps to the clock with setval while other
 * sessions call nextval). Here the test clock runs 256× faster than real time, so the counter lags on almost
 * every call and catch-ups race with fast paths all the time, from six sessions at once, for each guard.
 */
const SESSIONS = 6;
const CALLS = 20_000;

for (const guard of GUARD_KINDS) {
  test(`guard ${guard}: catch-ups racing six sessions never hand out an id twice`, async () => {
    const [server] = await useServers(1);
    const url = (server as { url: string }).url;
    const admin = await connect(url);
    const many = await sessions(url, SESSIONS);
    try {
      const schema = `race_${guard}`;
      const table = await shardWithTable(admin, { schema, shard: 77, guard, testClock: true });
      const base = Date.now();
      await setTestClock(
        admin,
        schema,
        `${base}::float8 + (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000 - ${base}) * 256`,
      );
      const before = await admin.query(`SELECT pg_catalog.pg_sequence_last_value($1::regclass) AS g`, [
        qualified(schema, 'next_id_guard'),
      ]);
      // Single-row statements (each call its own statement, as an app does) and one bulk statement per session.
      await Promise.all(
        many.all.map(async (c, i) => {
          await c.query(`INSERT INTO ${table} (v) SELECT ${i} FROM generate_series(1, ${CALLS})`);
          for (let k = 0; k < 300; k++) await c.query(`INSERT INTO ${table} (v) VALUES (${i})`);
        }),
      );
      const { rows } = await admin.query(
        `SELECT count(*)::int AS n, count(DISTINCT id)::int AS d,
                count(*) FILTER (WHERE ${qualified(schema, 'id_to_shard')}(id) <> 77)::int AS other FROM ${table}`,
      );
      const expected = SESSIONS * (CALLS + 300);
      assert.deepEqual(rows[0], { n: expected, d: expected, other: 0 });
      if (guard === 'seqlock') {
        const after = await admin.query(`SELECT pg_catalog.pg_sequence_last_value($1::regclass) AS g`, [
          qualified(schema, 'next_id_guard'),
        ]);
        // Each catch-up that moved the counter bumped the guard: the race was really exercised.
        assert.ok(Number(after.rows[0].g) - Number(before.rows[0].g ?? 0) > 100);
      }
    } finally {
      await many.close();
      await admin.end();
    }
  });
}

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect, installGenerator, layouts } from 'shardflake';
import { decodeId } from '../../packages/shardflake/src/ids/codec.js';
import { useServers } from '../support/postgres.js';
import { setTestClock } from './generator-fixture.js';

/*
 * Version 4's slow path has no statement of its own for "the tick does not fit the layout": it multiplies the era
 * into place, so that the store itself overflows. A shift would not: a clock past twice the layout's range wraps
 * (2^41 ms after the epoch shifted by 23 is a small positive id) and would move the counter backwards. Both clocks
 * must be refused (SQLSTATE 22003), and the slow path's advisory lock must be free afterwards (else every
 * later new era of this shard would wait forever).
 */
test('a clock past the layout’s range is refused as exhausted (even past twice the range), and the lock is released', async () => {
  const [server] = await useServers(1);
  const client = await connect((server as { url: string }).url);
  try {
    const schema = 'far_clock';
    await installGenerator(client, { schema, shard: 5, testClock: true });
    const t0 = Date.UTC(2030, 0, 1);
    await setTestClock(client, schema, t0);
    const { rows: before } = await client.query(`SELECT ${schema}.next_id() AS id`);

    const epoch = layouts.instagram.epoch;
    // Just past the range, the fast path's keep check already overflows ("bigint out of range"). Past twice the
    // range its shift wraps to a small tick, a clock far behind the counter, so ids go on from the counter until
    // its era is full (1,024 ids); then the slow path must refuse to store the clock's tick.
    for (const [ms, message] of [
      [epoch + 2 ** 40, /bigint out of range|exhausted/],
      [epoch + 2 ** 41 + 5, /generator in schema far_clock is exhausted/],
    ] as const) {
      await setTestClock(client, schema, ms);
      await assert.rejects(
        client.query(`SELECT ${schema}.next_id() FROM generate_series(1, 1100)`),
        (e: { code?: string; message?: string }) => e.code === '22003' && message.test(String(e.message)),
      );
      const { rows } = await client.query(
        `SELECT count(*)::int AS n FROM pg_catalog.pg_locks WHERE locktype = 'advisory'`,
      );
      assert.equal(rows[0].n, 0, 'the slow path left its advisory lock held');
    }

    await setTestClock(client, schema, t0 + 1000);
    const { rows: after } = await client.query(`SELECT ${schema}.next_id() AS id`);
    assert.ok(BigInt(after[0].id) > BigInt(before[0].id));
    assert.equal(decodeId(BigInt(after[0].id), layouts.instagram).timestamp.getTime(), t0 + 1000);
  } finally {
    await client.end();
  }
});

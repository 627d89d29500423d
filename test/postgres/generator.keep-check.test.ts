import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { connect, layouts } from 'shardflake';
import { generatorPlan, keepable } from '../../packages/shardflake/src/postgres/generator-sql.js';
import { useServers } from '../support/postgres.js';
import { narrowLayout } from './generator-fixture.js';

/*
 * The fast path keeps a counter value v at tick `now` by one bit trick, ((v - (now << T)) & M) = shard << S, which
 * must mean exactly "v's shard field is this shard and v's era is not behind the clock". This property evaluates the
 * generated SQL on a real server for random counter values — including sequences that carried into the shard
 * field, eras far ahead and behind, the largest tick, shard 0 and the largest shard — against that definition.
 */
test('the keep check is true exactly when the shard field is intact and the era is not behind the clock', async (t) => {
  const [server] = await useServers(1);
  const client = await connect((server as { url: string }).url);
  try {
    for (const layout of [layouts.instagram, narrowLayout]) {
      await t.test(layout.name, async () => {
        const probe = generatorPlan({ schema: 'k', shard: 0, layout });
        const { shardField, time, maxTick } = probe;
        const shardMax = Number(shardField.max);
        const counterValue = fc.record({
          era: fc.oneof(fc.bigInt(0n, maxTick), fc.constantFrom(0n, maxTick)),
          field: fc.oneof(fc.bigInt(0n, shardField.max), fc.constant(-1n)),
          seq: fc.bigInt(0n, probe.sequence.max),
        });
        const cases = fc.record({
          shard: fc.oneof(fc.integer({ min: 0, max: shardMax }), fc.constantFrom(0, shardMax)),
          value: counterValue,
          // now near the era (the interesting edge), or anywhere
          nowOffset: fc.oneof(fc.bigInt(-3n, 3n), fc.bigInt(-(1n << 38n), 1n << 38n)),
        });
        await fc.assert(
          fc.asyncProperty(fc.array(cases, { minLength: 50, maxLength: 50 }), async (batch) => {
            const rows = batch.map(({ shard, value, nowOffset }) => {
              const plan = generatorPlan({ schema: 'k', shard, layout });
              // field -1 stands for "this shard": most values a real counter holds look like that.
              const field = value.field === -1n ? BigInt(shard) : value.field;
              const v = (value.era << BigInt(time.shift)) | (field << BigInt(shardField.shift)) | value.seq;
              let now = value.era + nowOffset;
              if (now < 0n) now = 0n;
              if (now > maxTick) now = maxTick;
              const expected = field === BigInt(shard) && value.era >= now;
              return { sql: keepable(plan, `${v}::bigint`, `${now}::bigint`), expected, v, now, shard };
            });
            const { rows: got } = await client.query(
              `SELECT ARRAY[${rows.map((r) => r.sql).join(', ')}] AS keep`,
            );
            rows.forEach((r, i) => {
              assert.equal(got[0].keep[i], r.expected, `v=${r.v} now=${r.now} shard=${r.shard}`);
            });
          }),
          { numRuns: 40 },
        );
      });
    }
  } finally {
    await client.end();
  }
});

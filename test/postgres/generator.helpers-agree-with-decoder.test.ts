import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { connect, defineLayout, installGenerator, type Layout, layouts, withEpoch } from 'shardflake';
import { decodeId, encodeId, idRange } from '../../packages/shardflake/src/ids/codec.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';

// instagram, instagram with a custom epoch, and a layout with 10 ms ticks whose shard field sits below the
// sequence (so the counter has no gap and the sequence is not the lowest field).
const cases: { schema: string; shard: number; layout: Layout }[] = [
  { schema: 'h_instagram', shard: 8191, layout: layouts.instagram },
  { schema: 'h_epoch', shard: 3, layout: withEpoch(layouts.instagram, Date.UTC(2024, 0, 1)) },
  {
    schema: 'h_coarse',
    shard: 200,
    layout: defineLayout({
      name: 'coarse',
      epoch: Date.UTC(2020, 0, 1),
      timeUnitMs: 10,
      fields: [
        { kind: 'time', bits: 39 },
        { kind: 'shard', bits: 12 },
        { kind: 'sequence', bits: 12 },
      ],
    }),
  },
];

test('id_to_timestamp, id_to_shard and timestamp_to_min_id agree with the TypeScript decoder', async (t) => {
  const [server] = await useServers(1);
  const client = await connect((server as { url: string }).url);
  try {
    for (const c of cases) {
      await installGenerator(client, { schema: c.schema, shard: c.shard, layout: c.layout });
      const f = (name: string) => qualified(c.schema, name);
      await t.test(`${c.layout.name} (epoch ${new Date(c.layout.epoch).toISOString()})`, async () => {
        // Ids the generator issues decode to its shard and to (about) now.
        const { rows } = await client.query(`SELECT ${f('next_id')}() AS id FROM generate_series(1, 2000)`);
        for (const { id } of rows) {
          const d = decodeId(id as bigint, c.layout);
          assert.equal(d.fields.shard, c.shard);
          assert.ok(Math.abs(d.timestamp.getTime() - Date.now()) < 60_000);
        }
        // Any id of the layout (positive bigint), any instant after the epoch.
        const maxTick = Number(c.layout.maxSignedTick);
        const idArb = fc
          .record({
            tick: fc.integer({ min: 0, max: maxTick }),
            shard: fc.integer({ min: 0, max: Number((c.layout.field('shard') as { max: bigint }).max) }),
            sequence: fc.integer({ min: 0, max: Number((c.layout.sequence as { max: bigint }).max) }),
          })
          .map((p) => encodeId({ tick: BigInt(p.tick), shard: p.shard, sequence: p.sequence }, c.layout));
        const msArb = fc.integer({
          min: c.layout.epoch,
          max: Math.min(c.layout.epoch + maxTick * c.layout.timeUnitMs, 8.64e15),
        });
        const sample = fc.sample(fc.tuple(idArb, msArb), 300);
        const { rows: checked } = await client.query(
          `SELECT id, at_ms, extract(epoch FROM ${f('id_to_timestamp')}(id)) * 1000 AS ts_ms,
                  ${f('id_to_shard')}(id) AS shard, ${f('timestamp_to_min_id')}(to_timestamp(at_ms / 1000)) AS min_id
           FROM unnest($1::bigint[], $2::float8[]) AS s(id, at_ms)`,
          [sample.map(([id]) => id.toString()), sample.map(([, ms]) => ms)],
        );
        for (const r of checked) {
          const d = decodeId(r.id as bigint, c.layout);
          assert.equal(Number(r.ts_ms), d.timestamp.getTime(), `id_to_timestamp(${r.id})`);
          assert.equal(r.shard, d.fields.shard, `id_to_shard(${r.id})`);
          assert.equal(r.min_id, idRange(r.at_ms, r.at_ms, c.layout).min, `timestamp_to_min_id(${r.at_ms})`);
        }
      });
    }
  } finally {
    await client.end();
  }
});

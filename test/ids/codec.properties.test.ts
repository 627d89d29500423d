import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { decodeId, defineLayout, encodeId, formatId, type Layout, layouts, parseId } from 'shardflake';

const NON_TIME_KINDS = ['shard', 'worker', 'process', 'machine', 'sequence'] as const;

/** Random valid custom layouts: a time field first, then 1-4 other fields, at most 64 bits in all. */
const customLayout = fc
  .record({
    timeBits: fc.integer({ min: 1, max: 50 }),
    others: fc.array(fc.integer({ min: 1, max: 16 }), { minLength: 1, maxLength: 4 }),
    epoch: fc.integer({ min: 0, max: 1_700_000_000_000 }),
    timeUnitMs: fc.integer({ min: 1, max: 1000 }),
  })
  .filter((r) => r.timeBits + r.others.reduce((a, b) => a + b, 0) <= 64)
  .map((r) =>
    defineLayout({
      name: 'custom',
      epoch: r.epoch,
      timeUnitMs: r.timeUnitMs,
      fields: [
        { kind: 'time', bits: r.timeBits },
        ...r.others.map((bits, i) => ({ kind: NON_TIME_KINDS[i] as (typeof NON_TIME_KINDS)[number], bits })),
      ],
    }),
  );

const anyLayout = fc.oneof(fc.constantFrom(...Object.values(layouts)), customLayout);

/** Any id of a layout, as its fields. */
function partsOf(layout: Layout) {
  return fc.record(
    Object.fromEntries(
      layout.fields.map((f) => [f.kind === 'time' ? 'tick' : f.name, fc.bigInt({ min: 0n, max: f.max })]),
    ),
  );
}

test('decode(encode(x)) = x for every preset and random custom layouts', () => {
  fc.assert(
    fc.property(
      anyLayout.chain((layout) => fc.tuple(fc.constant(layout), partsOf(layout))),
      ([layout, parts]) => {
        const id = encodeId(parts, layout);
        const decoded = decodeId(id, layout);
        assert.equal(decoded.tick, parts.tick);
        for (const f of layout.fields)
          if (f.kind !== 'time') assert.equal(BigInt(decoded.fields[f.name] as number), parts[f.name]);
        assert.equal(encodeId({ tick: decoded.tick, ...decoded.fields }, layout), id);
      },
    ),
    { numRuns: 500 },
  );
});

test('id order = time order: a later tick always gives a larger id, whatever the other fields', () => {
  fc.assert(
    fc.property(
      anyLayout.chain((layout) => fc.tuple(fc.constant(layout), partsOf(layout), partsOf(layout))),
      ([layout, a, b]) => {
        fc.pre(a.tick !== b.tick);
        const [early, late] = (a.tick as bigint) < (b.tick as bigint) ? [a, b] : [b, a];
        assert.ok(encodeId(early, layout) < encodeId(late, layout));
      },
    ),
    { numRuns: 500 },
  );
});

test('base62 and base32 text round-trip and sort like the ids (plain string comparison)', () => {
  const id = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
  fc.assert(
    fc.property(id, id, (a, b) => {
      for (const encoding of ['base62', 'base32'] as const) {
        const ta = formatId(a, encoding);
        const tb = formatId(b, encoding);
        assert.equal(parseId(ta, encoding), a);
        assert.equal(Math.sign(Number(a - b)), ta < tb ? -1 : ta > tb ? 1 : 0);
      }
    }),
    { numRuns: 1000 },
  );
});

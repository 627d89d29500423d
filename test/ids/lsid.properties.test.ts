import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { lsid } from 'shardflake';

const TICKS_PER_DAY = 864_000_000_000;
const parts = fc.record({
  day: fc.integer({ min: 0, max: 2 ** 25 - 1 }),
  ticks: fc.integer({ min: 0, max: TICKS_PER_DAY - 1 }),
  worker: fc.integer({ min: 0, max: 2 ** 20 - 1 }),
  sequence: fc.integer({ min: 0, max: 1023 }),
});

test('parse(format(x)) = x, through text, bytes and the uuid form', () => {
  fc.assert(
    fc.property(parts, (p) => {
      const value = lsid.encode(p);
      const text = lsid.format(value);
      const back = lsid.parse(text);
      assert.deepEqual(
        { day: back.day, ticks: back.ticks, worker: back.worker, sequence: back.sequence },
        { ...p },
      );
      assert.equal(lsid.fromBytes(lsid.toBytes(value)).value, value);
      assert.equal(lsid.fromUuid(lsid.toUuid(value)).value, value);
    }),
    { numRuns: 500 },
  );
});

test('string order = numeric order, for the text, the bytes and the uuid text (Postgres compares uuids byte-wise)', () => {
  const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
  fc.assert(
    fc.property(parts, parts, fc.boolean(), (a, b, upper) => {
      const va = lsid.encode(a);
      const vb = lsid.encode(b);
      const numeric = va < vb ? -1 : va > vb ? 1 : 0;
      const cmp = (x: string, y: string) => (x < y ? -1 : x > y ? 1 : 0);
      assert.equal(cmp(lsid.format(va, { upper }), lsid.format(vb, { upper })), numeric);
      assert.equal(cmp(lsid.format(va, { hyphens: false }), lsid.format(vb, { hyphens: false })), numeric);
      assert.equal(cmp(hex(lsid.toBytes(va)), hex(lsid.toBytes(vb))), numeric);
      assert.equal(cmp(lsid.toUuid(va), lsid.toUuid(vb)), numeric);
      assert.equal(lsid.compare(va, vb), numeric);
    }),
    { numRuns: 1000 },
  );
});

test('parse is case-insensitive, reads I/L as 1 and O as 0, with or without hyphens', () => {
  const alias = { '1': ['i', 'I', 'l', 'L'], '0': ['o', 'O'] } as Record<string, string[]>;
  fc.assert(
    fc.property(
      parts,
      fc.array(fc.nat(), { minLength: 22, maxLength: 22 }),
      fc.boolean(),
      (p, choices, hyphens) => {
        const value = lsid.encode(p);
        const text = lsid.format(value, { hyphens });
        const mangled = [...text]
          .map((c, i) => {
            const options = [c.toLowerCase(), c.toUpperCase(), ...(alias[c] ?? [])];
            return options[(choices[i] as number) % options.length];
          })
          .join('');
        assert.equal(lsid.parse(mangled).value, value);
      },
    ),
    { numRuns: 500 },
  );
});

test('parse rejects everything else: any character outside Crockford base32 (U included) anywhere', () => {
  const valid = '0123456789abcdefghjkmnpqrstvwxyzABCDEFGHJKMNPQRSTVWXYZiIlLoO';
  fc.assert(
    fc.property(
      parts,
      fc.integer({ min: 0, max: 21 }),
      fc
        .oneof(
          fc.constantFrom('u', 'U', '-', '_', ' ', '*', '=', 'é', '\u0000', '.'),
          fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
        )
        .filter((c) => !valid.includes(c)),
      (p, at, bad) => {
        const text = lsid.format(lsid.encode(p));
        const broken = text.slice(0, at) + bad + text.slice(at + 1);
        fc.pre(broken !== text);
        assert.throws(
          () => lsid.parse(broken),
          (e: { code?: string }) => e.code === 'INVALID_ID',
        );
      },
    ),
    { numRuns: 500 },
  );
});

test('random strings are rejected unless they are exactly a valid LSID', () => {
  fc.assert(
    fc.property(fc.string({ maxLength: 30 }), (s) => {
      let parsed: bigint | undefined;
      try {
        parsed = lsid.parse(s).value;
      } catch (e) {
        assert.equal((e as { code?: string }).code, 'INVALID_ID');
        return;
      }
      assert.equal(lsid.format(parsed).toLowerCase(), lsid.format(lsid.parse(s.toLowerCase()).value));
    }),
    { numRuns: 1000 },
  );
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeId, defineLayout, encodeId, idRange, isShardflakeError, layouts } from 'shardflake';

const code = (c: string) => (error: unknown) => isShardflakeError(error) && error.code === c;

test('seed 001 worked example, corrected: (264384000000 << 23) | (1001 << 10) | 809 = 2217813737473025833', () => {
  const id = encodeId({ tick: 264384000000n, shard: 1001, sequence: 809 }, 'instagram');
  assert.equal(id, 2217813737473025833n);
  const decoded = decodeId('2217813737473025833', 'instagram');
  assert.equal(decoded.tick, 264384000000n);
  assert.deepEqual(decoded.fields, { shard: 1001, sequence: 809 });
  // The seed prints ...832, which is even and so cannot end in sequence 809: it decodes to 808.
  assert.equal(decodeId('2217813737473025832', 'instagram').fields.sequence, 808);
});

test('seed 003 example: shard 1341 and sequence 5001 % 1024 land in their fields (the ms count there is only illustrative)', () => {
  const id = (1387263000n << 23n) | (1341n << 10n) | (5001n % 1024n);
  assert.equal(encodeId({ tick: 1387263000n, shard: 1341, sequence: 5001 % 1024 }, 'instagram'), id);
  assert.deepEqual(decodeId(id, 'instagram').fields, { shard: 1341, sequence: 905 });
});

test("Discord's documented id 175928847299117063", () => {
  const decoded = decodeId(175928847299117063n, 'discord');
  assert.equal(decoded.timestamp.toISOString(), '2016-04-30T11:18:25.796Z');
  assert.deepEqual(decoded.fields, { worker: 1, process: 0, increment: 7 });
  assert.equal(
    encodeId(
      { timestamp: new Date('2016-04-30T11:18:25.796Z'), worker: 1, process: 0, increment: 7 },
      'discord',
    ),
    175928847299117063n,
  );
});

test('instagram ids stop fitting a signed bigint on 2046-06-27; the time field itself lasts until 2081', () => {
  assert.equal(layouts.instagram.signedOverflowAt?.toISOString().slice(0, 10), '2046-06-27');
  assert.equal(layouts.instagram.exhaustsAt.toISOString().slice(0, 10), '2081-04-30');
  assert.equal(layouts.snowflake.signedOverflowAt, null);
  assert.ok(layouts.discord.signedOverflowAt !== null);
  const lastSigned = layouts.instagram.maxSignedTick;
  assert.ok(encodeId({ tick: lastSigned, shard: 8191, sequence: 1023 }) <= 2n ** 63n - 1n);
  assert.ok(encodeId({ tick: lastSigned + 1n }) >= 2n ** 63n);
});

test('idRange covers exactly the ids of the interval', () => {
  const from = new Date('2024-01-01T00:00:00.000Z');
  const to = new Date('2024-01-01T00:00:00.009Z');
  const { min, max } = idRange(from, to, 'instagram');
  assert.equal(min, encodeId({ timestamp: from }));
  assert.equal(max, encodeId({ timestamp: to, shard: 8191, sequence: 1023 }));
  assert.ok(encodeId({ timestamp: to.getTime() + 1 }) > max);
  assert.ok(encodeId({ timestamp: from.getTime() - 1, shard: 8191, sequence: 1023 }) < min);
  assert.throws(() => idRange(to, from), code('INVALID_ARGUMENT'));
});

test('bad input: layouts wider than 64 bits, fields out of range, invalid ids', () => {
  assert.throws(
    () =>
      defineLayout({
        name: 'wide',
        epoch: 0,
        timeUnitMs: 1,
        fields: [
          { kind: 'time', bits: 42 },
          { kind: 'shard', bits: 13 },
          { kind: 'sequence', bits: 10 },
        ],
      }),
    code('LAYOUT_TOO_WIDE'),
  );
  assert.throws(
    () => defineLayout({ name: 'x', epoch: 0, timeUnitMs: 1, fields: [{ kind: 'shard', bits: 8 }] }),
    code('INVALID_LAYOUT'),
  );
  assert.throws(() => decodeId('1', 'tiktok'), code('INVALID_LAYOUT'));
  assert.throws(() => encodeId({ timestamp: Date.now(), shard: 8192 }), code('OUT_OF_RANGE'));
  assert.throws(() => encodeId({ timestamp: Date.now(), shard: -1 }), code('OUT_OF_RANGE'));
  assert.throws(() => encodeId({ timestamp: 0 }), code('OUT_OF_RANGE')); // before the epoch
  for (const bad of ['', 'abc', '-5', '1.5', '0x10', '18446744073709551616', ' 12 34']) {
    assert.throws(() => decodeId(bad), code('INVALID_ID'), bad);
  }
  assert.throws(() => decodeId(2n ** 63n, 'snowflake'), code('INVALID_ID')); // snowflake ids have 63 bits
});

test('a layout spec without a name compiles, and the layout is called custom', () => {
  const layout = defineLayout({ epoch: 0, timeUnitMs: 1, fields: [{ kind: 'time', bits: 41 }] });
  assert.equal(layout.name, 'custom');
});

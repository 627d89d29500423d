import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { formatId, type Inspection, inspect, isShardflakeError, layouts } from 'shardflake';

const code = (c: string) => (error: unknown) => isShardflakeError(error) && error.code === c;

/** What must not depend on the text form: the decoded time and every field. */
function decodedPart(result: Inspection) {
  return { format: result.format, timestamp: result.timestamp?.toISOString(), fields: result.fields };
}

test("Discord's documented id 175928847299117063 in base62 (0Czks0tP37X) and base32 (04W86BB0G4007)", () => {
  const decimal = inspect('175928847299117063', { layout: 'discord' });
  const base62 = formatId(175928847299117063n, 'base62');
  const base32 = formatId(175928847299117063n, 'base32');
  assert.deepEqual([base62, base32], ['0Czks0tP37X', '04W86BB0G4007']);
  for (const [text, encoding] of [
    [base62, 'base62'],
    [base32, 'base32'],
  ] as const) {
    const result = inspect(text, { layout: 'discord' });
    assert.equal(result.encoding, encoding);
    assert.equal(result.input, text);
    assert.equal(result.timestamp?.toISOString(), '2016-04-30T11:18:25.796Z');
    assert.deepEqual([result.fields.worker, result.fields.process, result.fields.increment], [1, 0, 7]);
    assert.equal(result.fields.id, '175928847299117063');
    assert.deepEqual(decodedPart(result), decodedPart(decimal));
    assert.match(result.explanation[0] ?? '', new RegExp(`175928847299117063 \\(written in ${encoding}\\)`));
  }
  assert.equal(decimal.encoding, 'decimal');
});

test('seed 001 instagram id 2217813737473025833 (corrected) as 2dpbqYax89p and 1XHT1V000Z9S9: shard 1001, sequence 809', () => {
  const decimal = inspect('2217813737473025833');
  for (const text of [formatId(2217813737473025833n, 'base62'), formatId(2217813737473025833n, 'base32')]) {
    const result = inspect(text);
    assert.equal(result.fields.layout, 'instagram');
    assert.deepEqual(
      [result.fields.tick, result.fields.shard, result.fields.sequence],
      ['264384000000', 1001, 809],
    );
    assert.deepEqual(decodedPart(result), decodedPart(decimal));
  }
  // Crockford decoding is case-insensitive and reads I/L as 1, O as 0; base62 is case-sensitive by nature.
  assert.deepEqual(decodedPart(inspect('1xht1v000z9s9')), decodedPart(decimal));
  assert.deepEqual(decodedPart(inspect('LXHTIVOOOZ9S9')), decodedPart(decimal));
  assert.notEqual(inspect('2DPBQYAX89P').fields.id, decimal.fields.id);
});

test('for random ids of every preset layout, base62 and base32 text decode to the same time and fields as the decimal', () => {
  const presets = Object.values(layouts);
  const idOf = (bits: number) => fc.bigInt({ min: 0n, max: (1n << BigInt(bits)) - 1n });
  fc.assert(
    fc.property(
      fc.constantFrom(...presets).chain((layout) => fc.tuple(fc.constant(layout), idOf(layout.totalBits))),
      ([layout, id]) => {
        const expected = decodedPart(inspect(id.toString(), { layout }));
        for (const encoding of ['base62', 'base32'] as const) {
          const text = formatId(id, encoding);
          assert.deepEqual(decodedPart(inspect(text, { layout, encoding })), expected);
          if (/^[0-9]+$/.test(text)) {
            // Small ids can encode to digits only; such text is read as decimal (the documented rule), where a
            // leading zero makes it invalid.
            assert.throws(() => inspect(text, { layout }), code('INVALID_ID'));
          } else {
            const detected = inspect(text, { layout });
            assert.equal(detected.encoding, encoding);
            assert.deepEqual(decodedPart(detected), expected);
          }
        }
      },
    ),
    { numRuns: 1000 },
  );
});

test('digits-only text is decimal unless an encoding is named; a named format skips detection', () => {
  assert.equal(
    inspect('00000000123', { encoding: 'base62' }).fields.id,
    String(1n * 62n * 62n + 2n * 62n + 3n),
  );
  assert.throws(() => inspect('00000000123'), code('INVALID_ID')); // decimal with a leading zero
  const eleven = inspect('12345678901');
  assert.deepEqual([eleven.encoding, eleven.fields.id], ['decimal', '12345678901']);
  assert.equal(inspect('12345678901', { encoding: 'base62' }).encoding, 'base62');
  assert.equal(inspect('1234567890123', { format: 'int64', encoding: 'base32' }).encoding, 'base32');
  assert.equal(inspect('2dpbqYax89p', { format: 'int64' }).encoding, 'base62');
  // 19 digits: an unhyphenated LSID only when asked for.
  assert.equal(inspect('1012000000000000000').format, 'int64');
  assert.equal(inspect('1012000000000000000', { format: 'lsid' }).format, 'lsid');
});

test('2^63 and above: a 63-bit layout refuses it, a 64-bit layout reads it like the decimal (negative in a signed bigint)', () => {
  // 2^63 in base32 is 8000000000000, digits only, so the encoding is named (detection would read it as decimal).
  for (const id of [2n ** 63n, 2n ** 64n - 1n]) {
    for (const encoding of ['base62', 'base32'] as const) {
      const text = formatId(id, encoding);
      assert.throws(() => inspect(text, { layout: 'snowflake', encoding }), code('INVALID_ID'));
      assert.throws(() => inspect(text, { layout: 'sonyflake', encoding }), code('INVALID_ID'));
      const instagram = inspect(text, { encoding });
      assert.deepEqual(decodedPart(instagram), decodedPart(inspect(id.toString())));
      assert.ok(instagram.explanation.some((line) => line.includes('negative')));
    }
  }
  assert.throws(() => inspect('9223372036854775808', { layout: 'snowflake' }), code('INVALID_ID'));
});

test('bad base62/base32 text and bad options are one typed error each', () => {
  const rejected: [string, Parameters<typeof inspect>[1], string][] = [
    ['zzzzzzzzzzz', {}, 'INVALID_ID'], // 62^11 − 1: more than 64 bits
    ['LygHa16AHYG', {}, 'INVALID_ID'], // 2^64 exactly
    ['G000000000000', {}, 'INVALID_ID'], // 2^64 in base32
    ['ZZZZZZZZZZZZZ', {}, 'INVALID_ID'], // 2^65 − 1
    ['2dpbqYax89-', {}, 'INVALID_ID'], // '-' is not base62
    ['2dpbqYax_9p', {}, 'INVALID_ID'],
    ['2dpbqYax89é', {}, 'INVALID_ID'],
    ['1XHT1V000Z9SU', {}, 'INVALID_ID'], // U is not Crockford
    ['1XHT1V-00Z9S9', {}, 'INVALID_ID'], // nor are hyphens, in a 64-bit id
    ['2dpbqYax89pp', {}, 'INVALID_ID'], // 12 characters: no format has that shape
    ['2dpbqYax89', { encoding: 'base62' }, 'INVALID_ID'], // 10 characters
    ['1XHT1V000Z9S9', { encoding: 'base62' }, 'INVALID_ID'], // base32's width
    ['1XHT1V000Z9S', { format: 'int64' }, 'INVALID_ID'],
    ['2dpbqYax89p', { format: 'objectid' }, 'INVALID_ID'],
    ['2dpbqYax89p', { format: 'ulid' }, 'INVALID_ID'],
    ['2dpbqYax89p', { format: 'uuid', encoding: 'base62' }, 'INVALID_ARGUMENT'],
    ['2dpbqYax89p', { format: 'int32' as never }, 'INVALID_ARGUMENT'],
    ['2dpbqYax89p', { encoding: 'base64' as never }, 'INVALID_ARGUMENT'],
  ];
  for (const [text, options, expected] of rejected) {
    assert.throws(
      () => inspect(text, options),
      (e) => code(expected)(e) && !(e as Error).message.includes('\n'),
      `${text} ${JSON.stringify(options)}`,
    );
  }
});

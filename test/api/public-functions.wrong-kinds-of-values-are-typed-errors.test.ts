import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  asId,
  asIds,
  capPerSecond,
  createGenerator,
  decodeId,
  defineLayout,
  describeUrl,
  encodeId,
  findMac,
  formatId,
  generatorPlan,
  generatorSql,
  hashKey,
  idRange,
  inspect,
  isShardflakeError,
  layouts,
  lsid,
  parseConfig,
  parseId,
  planPlacement,
  quoteIdent,
  redactSecrets,
  resolveLayout,
  shardForKey,
  shardSchema,
  sqlStateOf,
  validateConfig,
  validateIdentifier,
  withEpoch,
  workerIdFromMac,
} from 'shardflake';

/**
 * Every public function that takes outside input, given values of any kind (fast-check's `anything`, mixed with
 * values close to valid ones: preset names, ids as text, huge and non-finite numbers, dates out of range, layouts
 * with wrong field types), either returns or throws a ShardflakeError — never a raw TypeError or RangeError from
 * deep inside (found before: a number as a layout, an object as an id or a shard, an invalid Date in idRange).
 */
const nearlyValid = fc.oneof(
  fc.constantFrom(
    'instagram',
    'snowflake',
    'sonyflake',
    'discord',
    'base62',
    'base32',
    'decimal',
    '1',
    '-1',
    '175928847299117063',
    '00JTX-05RA0XA6-0CGM-6H',
    '0012d740-47b9-8989-b403-2141d4000000',
    'aa:bb:cc:dd:ee:ff',
    'postgres://u:secret@h:5432/db',
    '',
    '__proto__',
    'constructor',
  ),
  fc.constantFrom(
    Number.NaN,
    Number.POSITIVE_INFINITY,
    -0,
    2 ** 53,
    1e300,
    -1,
    8.64e15 + 1,
    2n ** 64n,
    -1n,
    new Date(Number.NaN),
    new Date(8.64e15),
    null,
    undefined,
    Symbol('s'),
    () => 1,
    [],
    {},
    new Uint8Array(12),
  ),
  fc.record(
    {
      name: fc.anything(),
      epoch: fc.anything(),
      timeUnitMs: fc.anything(),
      fields: fc.oneof(
        fc.anything(),
        fc.array(fc.record({ name: fc.anything(), kind: fc.anything(), bits: fc.anything() }), {
          maxLength: 4,
        }),
      ),
      layout: fc.anything(),
      shard: fc.anything(),
      worker: fc.anything(),
      tick: fc.anything(),
      sequence: fc.anything(),
      day: fc.anything(),
      ticks: fc.anything(),
      servers: fc.anything(),
      logicalShards: fc.anything(),
    },
    { requiredKeys: [] },
  ),
  fc.date({ noInvalidDate: false }),
  fc.bigInt(),
  fc.double(),
  fc.string({ maxLength: 40 }),
);
const value = fc.oneof({ weight: 3, arbitrary: nearlyValid }, { weight: 2, arbitrary: fc.anything() });

/** The call returned, or threw a ShardflakeError. */
function returnsOrThrowsTyped(name: string, call: () => unknown): void {
  try {
    call();
  } catch (error) {
    assert.ok(
      isShardflakeError(error),
      `${name} threw ${error instanceof Error ? `${error.constructor.name}: ${error.message}` : String(error)}`,
    );
  }
}

type Fn = (...args: never[]) => unknown;
const call = (fn: Fn, args: unknown[]) => (fn as (...a: unknown[]) => unknown)(...args);

/**
 * Each function with how many of its leading arguments carry outside input. The rest are labels a caller names
 * its own values with (`source` of a config, `what` of an identifier), left at their defaults.
 */
const PUBLIC: Record<string, [Fn, number]> = {
  asId: [asId, 1],
  asIds: [asIds, 1],
  capPerSecond: [capPerSecond, 1],
  decodeId: [decodeId, 2],
  defineLayout: [defineLayout, 1],
  describeUrl: [describeUrl, 1],
  encodeId: [encodeId, 2],
  findMac: [findMac, 1],
  formatId: [formatId, 2],
  generatorPlan: [generatorPlan, 1],
  generatorSql: [generatorSql, 1],
  hashKey: [hashKey, 1],
  idRange: [idRange, 3],
  inspect: [inspect, 2],
  parseConfig: [parseConfig, 1],
  parseId: [parseId, 2],
  planPlacement: [planPlacement, 1],
  quoteIdent: [quoteIdent, 1],
  redactSecrets: [redactSecrets, 1],
  resolveLayout: [resolveLayout, 1],
  shardForKey: [shardForKey, 2],
  shardSchema: [shardSchema, 2],
  sqlStateOf: [sqlStateOf, 1],
  validateConfig: [validateConfig, 1],
  validateIdentifier: [validateIdentifier, 1],
  withEpoch: [withEpoch, 2],
  workerIdFromMac: [workerIdFromMac, 1],
  'lsid.parse': [lsid.parse, 1],
  'lsid.format': [lsid.format, 2],
  'lsid.compare': [lsid.compare, 2],
  'lsid.encode': [lsid.encode, 1],
  'lsid.decode': [lsid.decode, 1],
  'lsid.toBytes': [lsid.toBytes, 1],
  'lsid.fromBytes': [lsid.fromBytes, 1],
  'lsid.toUuid': [lsid.toUuid, 1],
  'lsid.fromUuid': [lsid.fromUuid, 1],
};

describe('public functions given any kind of value: a result or a ShardflakeError', () => {
  for (const [name, [fn, arity]] of Object.entries(PUBLIC)) {
    it(name, () => {
      fc.assert(
        fc.property(fc.array(value, { maxLength: arity }), (args) => {
          returnsOrThrowsTyped(name, () => call(fn, args));
        }),
        { numRuns: 300 },
      );
    });
  }

  it('createGenerator(options).next() and lsid.createGenerator(options).next(), with any clock reading', () => {
    const options = fc.oneof(
      value,
      fc.record(
        {
          layout: value,
          shard: value,
          worker: value,
          process: value,
          machine: value,
          sequence: value,
          random: fc.func(value),
          clock: fc.func(value),
        },
        { requiredKeys: [] },
      ),
    );
    fc.assert(
      fc.property(options, (opts) => {
        returnsOrThrowsTyped('createGenerator', () => {
          const generator = createGenerator(opts as never);
          for (let i = 0; i < 3; i++) generator.next();
        });
        returnsOrThrowsTyped('lsid.createGenerator', () => {
          const generator = lsid.createGenerator(opts as never);
          for (let i = 0; i < 3; i++) generator.next();
        });
        returnsOrThrowsTyped('lsid.generate', () => lsid.generate(opts as never));
      }),
      { numRuns: 500 },
    );
  });

  it('a layout object with wrong field types, for every function that takes a layout', () => {
    const layoutLike = fc.oneof(value, fc.constant(layouts.instagram));
    fc.assert(
      fc.property(layoutLike, value, (layout, id) => {
        returnsOrThrowsTyped('decodeId', () => decodeId(id as never, layout as never));
        returnsOrThrowsTyped('encodeId', () => encodeId(id as never, layout as never));
        returnsOrThrowsTyped('idRange', () => idRange(id as never, id as never, layout as never));
        returnsOrThrowsTyped('withEpoch', () => withEpoch(layout as never, id as never));
        returnsOrThrowsTyped('inspect', () => inspect(id as never, { layout: layout as never }));
      }),
      { numRuns: 500 },
    );
  });
});

describe('the wrong kinds of values found by fuzzing: typed errors that name the argument', () => {
  const rejects = (call: () => unknown, code: string, message: RegExp) =>
    assert.throws(call, (e: unknown) => {
      assert.ok(isShardflakeError(e), `not a ShardflakeError: ${String(e)}`);
      assert.equal(e.code, code);
      assert.match(e.message, message);
      return true;
    });

  it('a number as a layout', () => {
    rejects(
      () => decodeId(1n, 5 as never),
      'INVALID_LAYOUT',
      /layout must be a preset name .* not a number$/,
    );
    rejects(() => createGenerator({ layout: 5 as never, shard: 1 }), 'INVALID_LAYOUT', /not a number$/);
  });

  it("a preset name that is one of Object's own properties", () => {
    rejects(() => resolveLayout('constructor'), 'INVALID_LAYOUT', /unknown layout "constructor"/);
  });

  it('an object as an id, as a shard, as a shard key', () => {
    rejects(() => decodeId({} as never), 'INVALID_ID', /^an object is not a 64-bit decimal id$/);
    rejects(() => formatId(Object.create(null)), 'INVALID_ID', /^an object is not/);
    rejects(
      () => createGenerator({ shard: {} as never }),
      'OUT_OF_RANGE',
      /^shard an object is out of range/,
    );
    rejects(() => shardForKey({} as never, 8), 'INVALID_ARGUMENT', /shard key must be .* not an object$/);
    rejects(() => lsid.format(null as never), 'INVALID_ID', /^null is not an LSID/);
  });

  it('a date outside what Date holds, or not a date at all, in idRange', () => {
    rejects(
      () => idRange(1e300, 1e300),
      'OUT_OF_RANGE',
      /^1e\+300 ms since 1970 is past the end of layout instagram/,
    );
    rejects(() => idRange(new Date(Number.NaN), new Date()), 'OUT_OF_RANGE', /time NaN is not a valid date/);
    rejects(
      () => idRange('2024-01-01' as never, new Date()),
      'OUT_OF_RANGE',
      /^idRange: from must be a Date/,
    );
  });

  it('a clock that returns something else than a number', () => {
    const generator = createGenerator({ shard: 1, clock: () => 5n as never });
    rejects(() => generator.next(), 'OUT_OF_RANGE', /clock reading 5 is not a number of milliseconds/);
  });
});

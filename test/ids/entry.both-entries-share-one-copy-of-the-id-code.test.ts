import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as main from 'shardflake';
import * as ids from 'shardflake/ids';

/**
 * `shardflake/ids` ships as one bundled module (scripts/bundle-ids.mjs), and `shardflake` reaches the same code
 * through the compiled ids/ modules, which re-export from that bundle; errors/ is outside the bundle. So an
 * application (or two libraries in it) importing both entries has one copy of each class and each piece of
 * state: an error thrown through one entry is an instance of the other's ShardflakeError, a layout made by one is
 * the other's as it is, and both use the process's one default LSID generator.
 */
describe('shardflake and shardflake/ids in one process', () => {
  it('export the same objects: classes, functions, presets and lsid', () => {
    const fromIds = Object.entries(ids);
    const fromMain = new Map(Object.entries(main));
    assert.ok(fromIds.length >= 20, `the ids entry exports ${fromIds.length} names`);
    const different = fromIds.filter(([name, value]) => fromMain.get(name) !== value).map(([name]) => name);
    assert.deepEqual(different, []);
  });

  it('an error thrown through either entry is an instance of both entries’ ShardflakeError', () => {
    const fromIds = (() => {
      try {
        ids.decodeId('not an id');
      } catch (error) {
        return error;
      }
    })();
    const fromMain = (() => {
      try {
        main.createGenerator({ layout: 'instagram', shard: -1 });
      } catch (error) {
        return error;
      }
    })();
    for (const error of [fromIds, fromMain]) {
      assert.ok(error instanceof main.ShardflakeError);
      assert.ok(error instanceof ids.ShardflakeError);
      assert.ok(main.isShardflakeError(error) && ids.isShardflakeError(error));
    }
    assert.equal((fromIds as main.ShardflakeError).code, 'INVALID_ID');
    assert.equal((fromMain as main.ShardflakeError).code, 'OUT_OF_RANGE');
  });

  it('a layout defined through one entry is used by the other as it is, not checked and copied again', () => {
    const layout = ids.defineLayout({
      name: 'narrow',
      epoch: Date.UTC(2024, 0, 1),
      timeUnitMs: 1,
      fields: [
        { kind: 'time', bits: 41 },
        { kind: 'shard', bits: 10 },
        { kind: 'sequence', bits: 12 },
      ],
    });
    assert.equal(main.resolveLayout(layout), layout);
    const generator = main.createGenerator({ layout, shard: 9, clock: () => Date.UTC(2025, 5, 1) });
    assert.equal(generator.layout, layout);
    const decoded = ids.decodeId(generator.next(), layout);
    assert.equal(decoded.fields.shard, 9);
    assert.equal(decoded.timestamp.getTime(), Date.UTC(2025, 5, 1));
    assert.equal(ids.resolveLayout('instagram'), main.layouts.instagram);
  });

  it('both entries draw from the one default LSID generator: interleaved LSIDs strictly increase', () => {
    const made: string[] = [];
    for (let i = 0; i < 2000; i++) made.push((i % 2 === 0 ? ids : main).lsid.generate());
    const unordered = made.filter((text, i) => i > 0 && ids.lsid.compare(made[i - 1] as string, text) !== -1);
    assert.deepEqual(unordered, []);
  });
});

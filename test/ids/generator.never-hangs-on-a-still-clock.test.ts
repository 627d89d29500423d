import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { createGenerator, decodeId, layouts, type PresetName, SequenceState } from 'shardflake';

/**
 * `next()` used to spin until the clock reached the next tick: with a clock that stands still (fake timers, a
 * stalled clock) the 1,025th instagram id in one tick never returned, and blocked the event loop. Now it waits at
 * most one tick of real time and then borrows the next tick, as it does after the clock steps back.
 */
describe('the app-side generator with a clock that stands still', () => {
  for (const [layout, fields] of [
    ['instagram', { shard: 7 }],
    ['sonyflake', { machine: 3 }],
  ] as const) {
    it(`${layout}: 5,000 strictly increasing ids, their ticks borrowed one full tick at a time`, () => {
      const now = layouts[layout].epoch + 1_000_000;
      const generator = createGenerator({ layout, ...fields, clock: () => now });
      const perTick = Number((layouts[layout].sequence?.max ?? 0n) + 1n);
      const ids = Array.from({ length: 5_000 }, () => generator.next());
      for (let k = 1; k < ids.length; k++) assert.ok((ids[k] as bigint) > (ids[k - 1] as bigint), `id ${k}`);
      // Every tick is used up before the next is borrowed: the last id is ⌊4999 / perTick⌋ ticks ahead.
      const last = decodeId(ids.at(-1) as bigint, layout);
      const ahead = (last.timestamp.getTime() - now) / layouts[layout].timeUnitMs;
      assert.equal(ahead, Math.floor(4_999 / perTick));
      assert.equal(last.fields.sequence, 4_999 % perTick);
    });
  }

  it('the state: a full tick is left only when the clock moves or the caller says to borrow', () => {
    const state = new SequenceState(1);
    assert.ok(state.advance(10));
    assert.ok(state.advance(10));
    assert.equal(state.advance(10), false, 'full, and the clock has not moved: wait');
    assert.ok(state.advance(10, true));
    assert.deepEqual([state.lastTick, state.sequence], [11, 0]);
  });
});

/** Clock readings in ms: standing still, stepping back, jumping ahead, over a few ticks around a base. */
const readingsArb = fc.array(fc.integer({ min: -40, max: 40 }), { minLength: 1, maxLength: 3_000 });

describe('the app-side generator over arbitrary clock sequences (fast-check)', () => {
  for (const layout of ['instagram', 'sonyflake'] as PresetName[]) {
    it(`${layout}: ids strictly increase, never below the clock, and ahead of it only by full ticks`, () => {
      const spec = layouts[layout];
      const perTick = Number((spec.sequence?.max ?? 0n) + 1n);
      const base = spec.epoch + 5_000_000;
      fc.assert(
        fc.property(readingsArb, fc.integer({ min: 1, max: 4 }), (offsets, repeat) => {
          // The clock returns each reading `repeat` times, then holds the last one.
          let call = 0;
          const readings: number[] = [];
          const clock = () => {
            const ms = base + (offsets[Math.min(Math.floor(call++ / repeat), offsets.length - 1)] as number);
            readings.push(ms);
            return ms;
          };
          const generator = createGenerator({ layout, shard: 1, worker: 1, machine: 1, clock });
          let previous = -1n;
          let highestTick = -1;
          for (let k = 1; k <= offsets.length * repeat; k++) {
            const id = generator.next();
            assert.ok(id > previous, 'strictly increasing');
            previous = id;
            for (const ms of readings.splice(0))
              highestTick = Math.max(highestTick, Math.floor((ms - spec.epoch) / spec.timeUnitMs));
            const tick = (decodeId(id, layout).timestamp.getTime() - spec.epoch) / spec.timeUnitMs;
            // Never behind the highest reading so far, and ahead of it only by ticks that were full first.
            assert.ok(tick >= highestTick, `tick ${tick} behind the clock's ${highestTick}`);
            assert.ok(tick - highestTick <= Math.floor((k - 1) / perTick), `tick ${tick} too far ahead`);
          }
        }),
        { numRuns: 60 },
      );
    });
  }
});

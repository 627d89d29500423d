import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createGenerator, decodeId, layouts, SequenceState } from 'shardflake';

test('the state: after a step back it keeps counting in the last tick, then runs ahead one tick at a time', () => {
  const state = new SequenceState(1); // two ids per tick
  assert.ok(state.advance(50));
  assert.ok(state.advance(50));
  // The clock steps back to 40: no waiting, no reuse — tick 51, 51, 52 …
  const issued: [number, number][] = [];
  for (let i = 0; i < 5; i++) {
    assert.ok(state.advance(40));
    issued.push([state.lastTick, state.sequence]);
  }
  assert.deepEqual(issued, [
    [51, 0],
    [51, 1],
    [52, 0],
    [52, 1],
    [53, 0],
  ]);
  // When the clock passes the logical tick, ids are back on the clock.
  assert.ok(state.advance(60));
  assert.deepEqual([state.lastTick, state.sequence], [60, 0]);
});

test('a generator whose clock steps back an hour never issues a smaller or repeated id', () => {
  const t0 = layouts.snowflake.epoch + 5_000_000_000;
  const readings = [t0, t0, t0 + 1, t0 - 3_600_000, t0 - 3_600_000, t0 - 3_599_999, t0 + 2, t0 + 5];
  let i = 0;
  const generator = createGenerator({
    layout: 'snowflake',
    worker: 9,
    clock: () => readings[Math.min(i++, readings.length - 1)] as number,
  });
  const ids = readings.map(() => generator.next());
  for (let k = 1; k < ids.length; k++) assert.ok((ids[k] as bigint) > (ids[k - 1] as bigint));
  const times = ids.map((id) => decodeId(id, 'snowflake').timestamp.getTime() - t0);
  // During the step back the ids stay on the last tick issued (t0 + 1); once the clock passes it, they follow it.
  assert.deepEqual(times, [0, 0, 1, 1, 1, 1, 2, 5]);
});

test('a tiny sequence during a long step back runs ahead of the clock by ids / sequence size ticks', () => {
  const t0 = layouts.sonyflake.epoch + 1_000_000;
  let now = t0;
  const generator = createGenerator({ layout: 'sonyflake', machine: 3, clock: () => now });
  generator.next();
  now = t0 - 60_000; // one minute back
  const ids = Array.from({ length: 2560 }, () => generator.next()); // 10 ticks of 256
  const last = decodeId(ids.at(-1) as bigint, 'sonyflake');
  assert.equal(last.timestamp.getTime(), t0 + 10 * layouts.sonyflake.timeUnitMs);
  for (let k = 1; k < ids.length; k++) assert.ok((ids[k] as bigint) > (ids[k - 1] as bigint));
});

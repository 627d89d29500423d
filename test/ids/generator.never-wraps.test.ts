import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createGenerator, decodeId, isShardflakeError, layouts, SequenceState } from 'shardflake';

test('the state: a full tick refuses (the caller waits) instead of wrapping to sequence 0', () => {
  const state = new SequenceState(3);
  assert.equal(state.advance(100), true);
  for (let s = 1; s <= 3; s++) {
    assert.equal(state.advance(100), true);
    assert.equal(state.sequence, s);
  }
  assert.equal(state.advance(100), false); // full: no fifth id in tick 100
  assert.equal(state.advance(100), false);
  assert.equal(state.advance(101), true);
  assert.deepEqual([state.lastTick, state.sequence], [101, 0]);
});

test('a generator whose clock stands still for a while waits for the next millisecond, never reusing a sequence', () => {
  // The clock reads the same millisecond 5,000 times, then moves on: the instagram sequence (1,024 values)
  // fills up and next() spins on the clock until the reading changes — or, after one millisecond of real time,
  // borrows the next tick (generator.never-hangs-on-a-still-clock.test.ts). Either way it moves one tick on.
  const start = layouts.instagram.epoch + 1_000_000;
  let reads = 0;
  const clock = () => start + Math.floor(reads++ / 5000);
  const generator = createGenerator({ layout: 'instagram', shard: 7, clock });
  const ids: bigint[] = [];
  for (let i = 0; i < 3000; i++) ids.push(generator.next());
  for (let i = 1; i < ids.length; i++)
    assert.ok((ids[i] as bigint) > (ids[i - 1] as bigint), `id ${i} not increasing`);
  const decoded = ids.map((id) => decodeId(id, 'instagram'));
  assert.ok(decoded.every((d) => d.fields.shard === 7));
  // 1,024 ids per millisecond, the 1,025th in the next one: the first three ticks are full.
  const perTick = new Map<bigint, number>();
  for (const d of decoded) perTick.set(d.tick, (perTick.get(d.tick) ?? 0) + 1);
  assert.deepEqual([...perTick.values()], [1024, 1024, 952]);
  // One read per id, and at least one more each time a full tick made it wait.
  assert.ok(reads >= 3000 + 2, 'the generator read the clock while waiting');
});

test('every preset: ids are strictly increasing and unique across a sequence roll-over', () => {
  for (const [name, layout] of Object.entries(layouts)) {
    let now = layout.epoch + 10_000_000;
    let calls = 0;
    // Advance the clock by one tick every 700 reads: for small sequences that means waiting, for large ones not.
    const clock = () => {
      if (++calls % 700 === 0) now += layout.timeUnitMs;
      return now;
    };
    const generator = createGenerator({ layout: name, shard: 1, worker: 1, process: 1, machine: 1, clock });
    let last = -1n;
    for (let i = 0; i < 10_000; i++) {
      const id = generator.next();
      assert.ok(id > last, `${name}: id ${i} not increasing`);
      last = id;
    }
  }
});

test('generator options: missing or out-of-range fields are typed errors', () => {
  const is = (c: string) => (e: unknown) => isShardflakeError(e) && e.code === c;
  assert.throws(() => createGenerator({ layout: 'instagram' }), is('INVALID_ARGUMENT'));
  assert.throws(() => createGenerator({ layout: 'instagram', shard: 8192 }), is('OUT_OF_RANGE'));
  assert.throws(() => createGenerator({ layout: 'snowflake', worker: 1024 }), is('OUT_OF_RANGE'));
  assert.throws(() => createGenerator({ layout: 'snowflake', worker: -1 }), is('OUT_OF_RANGE'));
  assert.throws(() => createGenerator({ layout: 'discord', worker: 1, process: 32 }), is('OUT_OF_RANGE'));
  const beforeEpoch = createGenerator({ layout: 'instagram', shard: 1, clock: () => 0 });
  assert.throws(() => beforeEpoch.next(), is('OUT_OF_RANGE'));
});

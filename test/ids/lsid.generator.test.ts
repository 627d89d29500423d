import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LsidState, lsid } from 'shardflake';

test('the state: a new tick takes its first sequence; the same tick counts up; a full tick moves on 100 ns', () => {
  const state = new LsidState(() => 1020, true);
  state.advance(19293, 100);
  const seen: [number, number, number][] = [];
  for (let i = 0; i < 5; i++) {
    state.advance(19293, 100);
    seen.push([state.day, state.ticks, state.sequence]);
  }
  assert.deepEqual(seen, [
    [19293, 100, 1021],
    [19293, 100, 1022],
    [19293, 100, 1023],
    [19293, 101, 1020], // full: our own tick moves forward instead of wrapping the sequence
    [19293, 101, 1021],
  ]);
});

test('the state: a fixed sequence gets one id per tick; the last tick of a day rolls into the next day', () => {
  const state = new LsidState(() => 7, false);
  state.advance(5, 863_999_999_999);
  state.advance(5, 863_999_999_999);
  assert.deepEqual([state.day, state.ticks, state.sequence], [6, 0, 7]);
});

test('the state: a clock step back continues from the last tick issued', () => {
  const state = new LsidState(() => 0, false);
  state.advance(10, 5_000);
  state.advance(10, 1_000); // stepped back
  assert.deepEqual([state.day, state.ticks], [10, 5_001]);
  state.advance(9, 0); // a day back
  assert.deepEqual([state.day, state.ticks], [10, 5_002]);
  state.advance(10, 9_000); // the clock caught up
  assert.deepEqual([state.day, state.ticks], [10, 9_000]);
});

test('generator with an injected clock: 100 ns ticks from fractional ms, strictly increasing text, the random sequence', () => {
  // A clock in ms as a double holds about 0.24 µs at today's dates; 481.5 and 0.25 are exact binary fractions.
  const t = Date.UTC(2022, 9, 28) + 481.5; // 2022-10-28T00:00:00.4815000Z
  const readings = [t, t, t - 5, t + 0.25];
  let i = 0;
  const randoms = [117, 500];
  let r = 0;
  const generator = lsid.createGenerator({
    worker: 12820,
    clock: () => readings[i++] as number,
    random: () => randoms[r++] as number,
  });
  const ids = readings.map(() => generator.next());
  const parsed = ids.map((id) => lsid.parse(id));
  assert.equal(parsed[0]?.day, 19293);
  assert.equal(parsed[0]?.time, '2022-10-28T00:00:00.4815000Z');
  assert.deepEqual(
    parsed.map((p) => [p.ticks - 4_815_000, p.sequence, p.worker]),
    [
      [0, 117, 12820], // first id of a tick: a random sequence (1st draw)
      [0, 118, 12820], // same tick: counts up (no draw)
      [0, 119, 12820], // clock stepped back 5 ms: keeps the last tick and counts on
      [2500, 500, 12820], // the clock is 250 µs past it: a new tick, a new random sequence (2nd draw)
    ],
  );
  for (let k = 1; k < ids.length; k++) assert.ok((ids[k] as string) > (ids[k - 1] as string));
});

test('the default generator: 50,000 ids, strictly increasing as text, no duplicates, close to now', () => {
  const generator = lsid.createGenerator({ worker: 1 });
  const before = Date.now();
  const ids = Array.from({ length: 50_000 }, () => generator.next());
  const after = Date.now();
  for (let k = 1; k < ids.length; k++) assert.ok((ids[k] as string) > (ids[k - 1] as string));
  assert.equal(new Set(ids).size, ids.length);
  const first = lsid.parse(ids[0] as string).timestamp.getTime();
  assert.ok(first >= before - 2 && first <= after + 2, `${first} not within [${before}, ${after}]`);
  assert.equal(lsid.parse(ids[0] as string).worker, 1);
  assert.match(
    lsid.generate(),
    /^[0-9a-hjkmnp-tv-z]{5}-[0-9a-hjkmnp-tv-z]{8}-[0-9a-hjkmnp-tv-z]{4}-[0-9a-hjkmnp-tv-z]{2}$/,
  );
  assert.match(lsid.generate({ upper: true, sequence: 'monotonic' }), /^[0-9A-Z-]{22}$/);
});

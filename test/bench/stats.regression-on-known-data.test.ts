import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  bootstrapSlope,
  downsample,
  linearRegression,
  percentile,
  seededRandom,
  shuffle,
} from '../../packages/cli/src/bench/stats.js';

test('an exact line gives back its slope and intercept (the paper-sized numbers too)', () => {
  // Seed 002's UUID line: 0.136 ns per row on a 3.34 ms intercept, over 100,000 inserts.
  const slope = 0.13634740839764645;
  const intercept = 3339880.9344822564;
  const xs = Array.from({ length: 100_000 }, (_, i) => i);
  const ys = xs.map((x) => intercept + slope * x);
  const line = linearRegression(xs, ys);
  assert.ok(Math.abs(line.slope - slope) < 1e-9, `slope ${line.slope}`);
  assert.ok(Math.abs(line.intercept - intercept) < 1e-4, `intercept ${line.intercept}`);
});

test('least squares on a small hand-computed set', () => {
  // x = 0,1,2,3; y = 1,3,2,6: mean x 1.5, mean y 3, Sxy = 7.0, Sxx = 5 → slope 1.4, intercept 0.9.
  const line = linearRegression([0, 1, 2, 3], [1, 3, 2, 6]);
  assert.ok(Math.abs(line.slope - 1.4) < 1e-12);
  assert.ok(Math.abs(line.intercept - 0.9) < 1e-12);
});

test('any line is recovered whatever its scale (property)', () => {
  fc.assert(
    fc.property(
      fc.double({ min: -1e6, max: 1e6, noNaN: true }),
      fc.double({ min: -1e9, max: 1e9, noNaN: true }),
      fc.integer({ min: 2, max: 500 }),
      (slope, intercept, n) => {
        const xs = Array.from({ length: n }, (_, i) => i * 3);
        const line = linearRegression(
          xs,
          xs.map((x) => intercept + slope * x),
        );
        const scale = Math.abs(intercept) + Math.abs(slope) * n * 3 + 1;
        return (
          Math.abs(line.slope - slope) * n * 3 <= 1e-6 * scale &&
          Math.abs(line.intercept - intercept) <= 1e-6 * scale
        );
      },
    ),
  );
});

test('bad input is refused with INVALID_ARGUMENT', () => {
  assert.throws(() => linearRegression([1], [1]), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => linearRegression([1, 1, 1], [1, 2, 3]), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => linearRegression([1, 2], [1]), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => percentile([], 50), { code: 'INVALID_ARGUMENT' });
  assert.throws(() => percentile([1], 101), { code: 'INVALID_ARGUMENT' });
});

test('percentiles by nearest rank', () => {
  const values = Array.from({ length: 100 }, (_, i) => 100 - i); // 100 … 1, unsorted on purpose
  assert.equal(percentile(values, 50), 50);
  assert.equal(percentile(values, 99), 99);
  assert.equal(percentile(values, 100), 100);
  assert.equal(percentile(values, 0), 1);
  assert.equal(percentile([7], 99), 7);
  assert.equal(percentile([1, 2, 3, 4], 50), 2);
});

test('the bootstrap interval holds an exact slope tightly and a noisy slope inside it', () => {
  const xs = Array.from({ length: 2000 }, (_, i) => i);
  const exact = bootstrapSlope(
    xs,
    xs.map((x) => 5 + 2 * x),
  );
  assert.ok(Math.abs(exact.low - 2) < 1e-9 && Math.abs(exact.high - 2) < 1e-9);
  const random = seededRandom(42);
  const noisy = xs.map((x) => 1000 + 0.5 * x + (random() - 0.5) * 400);
  const ci = bootstrapSlope(xs, noisy, { resamples: 300, random: seededRandom(7) });
  assert.ok(ci.low < 0.5 && 0.5 < ci.high, `[${ci.low}, ${ci.high}]`);
  assert.ok(ci.high - ci.low < 0.2, 'the interval narrows around the true slope');
  assert.equal(ci.level, 0.95);
  // Pure noise: the interval contains 0.
  const flat = xs.map(() => 1000 + (random() - 0.5) * 400);
  const none = bootstrapSlope(xs, flat, { random: seededRandom(7) });
  assert.ok(none.low < 0 && 0 < none.high);
});

test('downsample keeps first and last and at most max points; shuffle permutes', () => {
  const points = Array.from({ length: 10_001 }, (_, i) => i);
  const few = downsample(points, 500);
  assert.equal(few.length, 500);
  assert.equal(few[0], 0);
  assert.equal(few.at(-1), 10_000);
  assert.deepEqual(downsample([1, 2, 3], 10), [1, 2, 3]);
  const shuffled = shuffle(points, seededRandom(3));
  assert.deepEqual(
    [...shuffled].sort((a, b) => a - b),
    points,
  );
  assert.notDeepEqual(shuffled, points);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { estimateMoves, type MeasuredSet } from '../../packages/shardflake/src/move/rebalance.js';

/**
 * Issue 33, item 5: a rebalance printed an estimate of 15,206 s for a job that took 28.5 s. The fit on two earlier
 * moves gave the cost per row a negative coefficient; clamping it to 0 kept the cost per shard it had inflated.
 */

const set = fc.record({
  shards: fc.integer({ min: 1, max: 5000 }),
  rows: fc.integer({ min: 0, max: 10_000_000 }),
  seconds: fc.double({ min: 0, max: 100_000, noNaN: true }),
});

/** The bounds the estimate promises (rebalance.ts, estimateMoves), computed here on their own. */
function scaled(h: MeasuredSet, shards: number, rows: number): [number, number] {
  const byShards = shards / h.shards;
  const byRows = h.rows > 0 ? rows / h.rows : byShards;
  return [h.seconds * Math.min(byShards, byRows), h.seconds * Math.max(byShards, byRows)];
}

test('for any history of non-negative durations the estimate is non-negative and lies between the fastest and slowest set scaled to the plan', () => {
  fc.assert(
    fc.property(
      fc.array(set, { minLength: 1, maxLength: 12 }),
      fc.integer({ min: 0, max: 8192 }),
      fc.integer({ min: 0, max: 50_000_000 }),
      (history, shards, rows) => {
        const estimate = estimateMoves(history, shards, rows);
        assert.ok(estimate);
        const lows = history.map((h) => scaled(h, shards, rows)[0]);
        const highs = history.map((h) => scaled(h, shards, rows)[1]);
        // Rounded to tenths of a second: allow that much.
        const slack = 0.051;
        assert.ok(estimate.seconds >= 0 && Number.isFinite(estimate.seconds));
        assert.ok(estimate.low <= estimate.seconds && estimate.seconds <= estimate.high);
        assert.ok(
          estimate.seconds >= Math.min(...lows) - slack,
          `${estimate.seconds} < ${Math.min(...lows)}`,
        );
        assert.ok(
          estimate.seconds <= Math.max(...highs) + slack,
          `${estimate.seconds} > ${Math.max(...highs)}`,
        );
        assert.ok(estimate.secondsPerShard >= 0 && estimate.rowsPerSecond >= 0);
        assert.equal(
          estimate.thin,
          history.length < 3 || shards > 10 * Math.max(...history.map((h) => h.shards)),
        );
      },
    ),
    { numRuns: 2000 },
  );
});

test('a history that is exactly shards × a + rows × b is fitted back to a and b, and the bounds do not move it', () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.record({ shards: fc.integer({ min: 1, max: 2000 }), rows: fc.integer({ min: 0, max: 1e6 }) }),
        {
          minLength: 3,
          maxLength: 10,
        },
      ),
      fc.double({ min: 0.001, max: 2, noNaN: true }),
      fc.double({ min: 0, max: 0.001, noNaN: true }),
      (sizes, a, b) => {
        // Sets all of one rows-per-shard cannot tell a cost per shard from one per row: no fit can recover both.
        const ratios = sizes.map((s) => s.rows / s.shards);
        fc.pre(Math.max(...ratios) > 1.01 * Math.min(...ratios) + 1);
        const history = sizes.map((s) => ({ ...s, seconds: s.shards * a + s.rows * b }));
        const estimate = estimateMoves(history, 1000, 500_000);
        assert.ok(estimate);
        const truth = 1000 * a + 500_000 * b;
        assert.ok(
          Math.abs(estimate.seconds - truth) <= 0.05 + truth * 1e-6,
          `${estimate.seconds} vs ${truth}`,
        );
      },
    ),
  );
});

test("the issue's shape: a one-shard move with a fixed cost beside a large set no longer makes a cost per shard of seconds", () => {
  // The free fit: a + 100 b = 5 and 800 a + 400,000 b = 30 give b = −0.0124 and a = 6.24 s per shard, so the old
  // code (b clamped to 0 afterwards) estimated 820 shards at 5,117 s; both sets ran at ≤ 0.04 s per shard once
  // the single move's fixed cost is spread.
  const history = [
    { shards: 1, rows: 100, seconds: 5 },
    { shards: 800, rows: 400_000, seconds: 30 },
  ];
  const estimate = estimateMoves(history, 820, 410_000);
  assert.ok(estimate);
  assert.ok(estimate.seconds > 20 && estimate.seconds < 60, `estimate ${estimate.seconds} s`);
  assert.ok(estimate.secondsPerShard < 0.1);
  // Two sets are a thin history: the caller is told, with the range the sets' own rates allow.
  assert.equal(estimate.thin, true);
  assert.ok(estimate.low <= estimate.seconds && estimate.seconds <= estimate.high);
});

test('no history, no estimate; sets without shards or with unmeasurable times are left out', () => {
  assert.equal(estimateMoves([], 10, 10), null);
  assert.equal(estimateMoves([{ shards: 0, rows: 0, seconds: 5 }], 10, 10), null);
  assert.equal(estimateMoves([{ shards: 2, rows: 0, seconds: Number.NaN }], 10, 10), null);
  const only = estimateMoves([{ shards: 2, rows: 0, seconds: 1 }], 10, 0);
  assert.deepEqual(only && { seconds: only.seconds, low: only.low, high: only.high }, {
    seconds: 5,
    low: 5,
    high: 5,
  });
});

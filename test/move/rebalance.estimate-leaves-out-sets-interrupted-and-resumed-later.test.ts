import assert from 'node:assert/strict';
import { test } from 'node:test';
import { withoutInterruptions } from '../../packages/shardflake/src/move/rebalance.js';

/**
 * Issue 21, item 6: a rebalance estimated 344 s for 1 s of work. Its fit runs on the durations of earlier finished
 * sets, from start to last phase, so a set killed and resumed an hour later counts the hour. Such sets (over ten
 * times the median time per shard) are left out; fewer than three sets give no median and are all kept.
 */
test('the rebalance estimate leaves out sets that took over ten times the median time per shard, and keeps everything when there are fewer than three', () => {
  const first = { shards: 2, rows: 200, seconds: 0.6 };
  const quick = [first, { shards: 1, rows: 100, seconds: 0.3 }, { shards: 4, rows: 400, seconds: 1.4 }];
  const resumedAnHourLater = { shards: 1, rows: 100, seconds: 3600 };
  assert.deepEqual(withoutInterruptions([...quick, resumedAnHourLater]), quick);
  const slowButSteady = { shards: 8, rows: 80_000, seconds: 20 }; // 2.5 s per shard: under 10 × the median (0.3)
  assert.deepEqual(withoutInterruptions([...quick, slowButSteady]), [...quick, slowButSteady]);
  assert.deepEqual(withoutInterruptions([first, resumedAnHourLater]), [first, resumedAnHourLater]);
});

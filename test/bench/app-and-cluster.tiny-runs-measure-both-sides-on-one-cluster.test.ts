import assert from 'node:assert/strict';
import { it } from 'node:test';
import { runAppBench } from '../../packages/cli/src/bench/app.js';
import { runClusterBench } from '../../packages/cli/src/bench/cluster.js';

it('bench cluster: a tiny run creates every shard, measures router and direct inserts per round, and its feed touches every shard', async () => {
  const phases = new Set<string>();
  const r = await runClusterBench({
    initShards: 16,
    rows: 100,
    rounds: 2,
    feedUsers: 20,
    feedRuns: 3,
    onProgress: (phase) => phases.add(phase),
  });
  assert.equal(r.init.logicalShards, 16);
  assert.equal(r.init.servers, 2);
  assert.deepEqual([r.inserts.routerPerSecond.length, r.inserts.directPerSecond.length], [2, 2]);
  assert.ok(r.inserts.routerPerSecond.every((x) => x > 0) && r.inserts.directPerSecond.every((x) => x > 0));
  // The ratio is the router's median over the direct side's, not anything else.
  assert.ok(
    Math.abs(r.inserts.ratio / (r.inserts.routerMedian / r.inserts.directMedian) - 1) < 0.01,
    JSON.stringify(r),
  );
  assert.equal(r.feed.shardsTouched, 16);
  assert.ok(r.feed.p99Ms >= r.feed.p50Ms && r.feed.p50Ms > 0);
  assert.ok(phases.has('init'));
});

it('bench app: a tiny run measures each side against its baseline in the same rounds', async () => {
  const r = await runAppBench({ shards: 4, rounds: 2, transactions: 20, rows: 200, concurrency: 4 });
  for (const side of [r.sessions, r.bulk, r.copy]) {
    assert.deepEqual([side.rounds.length, side.baseline.length], [2, 2], JSON.stringify(side));
    assert.ok(side.rounds.every((x) => x > 0) && side.baseline.every((x) => x > 0));
    // Medians are rounded to whole rates before they are printed: the ratio is theirs within what rounding each by
    // up to 0.5 can move it (1 % at rates of 100 a second; more on a loaded machine, where rates are low).
    const rounding = 0.5 / side.median + 0.5 / side.baselineMedian + 0.001;
    assert.ok(
      Math.abs(side.ratio / (side.median / side.baselineMedian) - 1) < Math.max(0.01, rounding),
      JSON.stringify(side),
    );
    assert.ok(
      side.spread[0] <= side.ratio + 0.001 && side.ratio <= side.spread[1] + 0.001,
      JSON.stringify(side),
    );
  }
  assert.equal(r.bulk.singleRows, 20, 'the single-row side inserts a tenth of the rows');
  assert.equal(r.app, undefined, 'the example workload runs only when asked');
});

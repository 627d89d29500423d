import assert from 'node:assert/strict';
import { it } from 'node:test';
import { runReferenceBench } from '../../packages/cli/src/bench/reference.js';

it('bench cross (c): a tiny run measures the baseline and withReference on 1 and 2 servers, ratios per round', async () => {
  const phases = new Set<string>();
  const result = await runReferenceBench({
    servers: [2, 1, 2],
    writes: 30,
    rounds: 2,
    concurrency: 2,
    coldWrites: 3,
    onProgress: (phase) => phases.add(phase),
  });
  assert.deepEqual(
    result.sides.map((s) => [s.name, s.servers]),
    [
      ['baseline: one local transaction on one server (pg)', 1],
      ['withReference on 1 server', 1],
      ['withReference on 2 servers', 2],
    ],
  );
  assert.equal(result.sides[0]?.ratio, 1);
  for (const side of result.sides) {
    assert.equal(side.perSecond.length, 2);
    assert.ok(
      side.median > 0 && side.ratio > 0 && side.p50Ms > 0 && side.p99Ms >= side.p50Ms,
      JSON.stringify(side),
    );
    assert.equal(side.cold.writes, 3);
  }
  assert.equal(result.settings.fsync, 'on');
  assert.deepEqual([...phases], ['cold', 'rounds']);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runIdsBench } from '@shardflake/cli';

// Speed is not asserted here (that is the benchmark's job, as ratios); this proves the bench runs, counts what it
// says it counts, and that our generators produced no duplicate and no out-of-order id while it ran.
test('runIdsBench: JSON-able result, caps for our layouts, zero duplicates from our generators', async () => {
  const result = await runIdsBench({
    durationMs: 40,
    rounds: 1,
    only: ['shardflake', 'randomUUID', 'sapphire'],
  });
  assert.deepEqual(JSON.parse(JSON.stringify(result)), result);
  const names = result.entries.map((e) => e.name);
  for (const name of [
    'shardflake instagram',
    'shardflake snowflake',
    'shardflake lsid',
    'crypto.randomUUID',
  ]) {
    assert.ok(names.includes(name), name);
  }
  for (const e of result.entries.filter((x) => x.group === 'shardflake')) {
    assert.ok(e.count > 0, e.name);
    assert.equal(e.duplicates, 0, e.name);
    assert.equal(e.orderViolations, 0, e.name);
  }
  assert.equal(result.entries.find((e) => e.name === 'shardflake instagram')?.cap, 1_024_000);
  assert.equal(result.entries.find((e) => e.name === 'crypto.randomUUID')?.ratioToRandomUUID, 1);
  assert.ok(result.targets.some((t) => t.what.startsWith('LSID')));
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { benchCrossContended } from '../../packages/cli/src/bench/cross-contended.js';

// bench cross --contended, tiny: both sides run on the same servers and report what the command prints; with the
// detector, deadlocks are broken and no call waits near lock_timeout; with lock_timeout only, a deadlock lasts
// until lock_timeout ends it (LOCK_TIMEOUT). Money is conserved on both.
test('bench cross --contended: the detector breaks deadlocks (DEADLOCK, calls far below lock_timeout), lock_timeout alone ends them late; totals conserved', async () => {
  const result = await benchCrossContended({ seconds: 3, clients: 6, hotAccounts: 2, lockTimeoutMs: 2500 });
  const [detector, timeoutOnly] = result.sides;
  assert.ok(detector && timeoutOnly);
  assert.equal(detector.name, 'detector (defaults)');
  for (const side of result.sides) {
    assert.ok(side.conserved, `${side.name}: total conserved`);
    assert.equal(side.hung, 0, side.name);
    assert.deepEqual(side.otherFailures, {}, side.name);
    assert.ok(side.committed > 0 && side.calls >= side.committed + side.deadlocks + side.lockTimeouts);
    assert.ok(side.p50Ms <= side.p99Ms && side.p99Ms <= side.longestMs);
  }
  assert.ok(detector.deadlocks > 0, `deadlocks broken: ${JSON.stringify(detector)}`);
  assert.equal(detector.lockTimeouts, 0, JSON.stringify(detector));
  assert.equal(timeoutOnly.deadlocks, 0, 'no detector, no DEADLOCK');
  assert.ok(timeoutOnly.lockTimeouts > 0, `lock_timeout ended the deadlocks: ${JSON.stringify(timeoutOnly)}`);
  assert.ok(timeoutOnly.longestMs >= 2400, 'a deadlock lasted until lock_timeout');
});

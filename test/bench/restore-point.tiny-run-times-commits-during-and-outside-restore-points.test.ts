import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { it } from 'node:test';
import { benchRestorePoint } from '../../packages/cli/src/bench/restore-point.js';
import { CLI_MAIN } from '../support/cli.js';

it('bench restore-point: a tiny run times cross-server and same-server transfers during and outside its restore points', async () => {
  const result = await benchRestorePoint({
    servers: [2],
    rounds: 3,
    intervalMs: 100,
    clients: 2,
    localClients: 1,
    accounts: 50,
  });
  const [size] = result.sizes;
  assert.ok(size);
  assert.equal(size.servers, 2);
  assert.equal(size.restorePoints, 3);
  assert.ok(size.heldMs.p50 > 0 && size.heldMs.max >= size.heldMs.p50, JSON.stringify(size.heldMs));
  for (const kind of [size.cross, size.local]) {
    assert.ok(kind.baseline.count > 0 && kind.during.count > 0, JSON.stringify(kind));
    assert.ok(kind.baseline.p50 > 0 && kind.baseline.max >= kind.baseline.p99, JSON.stringify(kind));
    assert.equal(kind.longestDelayDuring, Math.round((kind.during.max - kind.baseline.p50) * 100) / 100);
  }
});

it('bench restore-point refuses a cluster of one server in one line', () => {
  const r = spawnSync(process.execPath, [CLI_MAIN, 'bench', 'restore-point', '--servers', '1,2'], {
    encoding: 'utf8',
  });
  assert.equal(r.status, 2);
  assert.match(
    r.stderr,
    /^shardflake: error \[INVALID_ARGUMENT\]: --servers must be a list of server counts from 2 to 26 such as 2,4, not "1,2"\n$/,
  );
});

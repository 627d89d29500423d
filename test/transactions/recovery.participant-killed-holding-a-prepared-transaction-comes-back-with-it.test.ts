import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { crashRouterAt, killServer, useCrashCluster } from './support.js';

// a holds the catalog and shard 0, b shard 1, c shard 2 (support.ts, useCrashCluster).
const cluster = await useCrashCluster({ inDoubtAfterMs: 0 });
const { configFile, server, restart, shardsWith, ours, recoverUntil } = cluster;

describe('servers killed -9 in the middle of a commit across servers', () => {
  it('a participant killed -9 while it holds a prepared transaction comes back with it, and recovery commits it', async () => {
    await crashRouterAt(configFile, 'after-decision', [0, 1], 'k3');
    const [gid] = await ours('b');
    assert.ok(gid);
    await killServer(server('b'));
    await restart('b');
    assert.deepEqual(await ours('b'), [gid], 'the prepared transaction survived the crash of its server');
    assert.deepEqual(await shardsWith('k3'), [0]);
    await recoverUntil(async () => (await ours('b')).length === 0);
    assert.deepEqual(await shardsWith('k3'), [0, 1]);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { killServer, killServerNow, postmasterPid, useCrashCluster } from './support.js';

// a holds the catalog and shard 0, b shard 1, c shard 2 (support.ts, useCrashCluster).
const cluster = await useCrashCluster({ inDoubtAfterMs: 0 });
const { server, restart, shardsWith, ours, recoverUntil, router } = cluster;

describe('servers killed -9 in the middle of a commit across servers', () => {
  it('the catalog (the last agent) killed just before its decision COMMIT: COMMIT_UNKNOWN, then rolled back everywhere', async () => {
    const pid = await postmasterPid(server('a'));
    cluster.onEvent = (e) => {
      if (e.type === 'transaction' && e.phase === 'decide' && e.step === 'start') killServerNow(pid);
    };
    await assert.rejects(
      router.withShards([{ shard: 0 }, { shard: 1 }], async ([x, y]) => {
        await x?.query(`INSERT INTO marks (tag) VALUES ('k1')`);
        await y?.query(`INSERT INTO marks (tag) VALUES ('k1')`);
      }),
      (e) => isShardflakeError(e, 'COMMIT_UNKNOWN'),
    );
    cluster.onEvent = () => {};
    await killServer(server('a'), pid);
    const [gid] = await ours('b');
    assert.ok(gid, 'b stays prepared: the router may not guess the decision');

    // With the catalog down, transactions over other servers commit (their decision is on b) …
    await router.withShards([{ shard: 1 }, { shard: 2 }], async ([y, z]) => {
      await y?.query(`INSERT INTO marks (tag) VALUES ('k1-other')`);
      await z?.query(`INSERT INTO marks (tag) VALUES ('k1-other')`);
    });
    // … and recovery leaves b's gid alone: its decision server a does not answer.
    const report = await router.recoverTransactions();
    assert.deepEqual(
      report.waiting.map((g) => [g.gid, g.decision]),
      [[gid, 'unreachable']],
    );
    assert.ok(report.unreachable.some((u) => u.server === 'a'));
    assert.deepEqual(await ours('b'), [gid]);

    await restart('a');
    await recoverUntil(async () => (await ours('b')).length === 0);
    assert.deepEqual(await shardsWith('k1'), []);
    assert.deepEqual(await shardsWith('k1-other'), [1, 2]);
  });

  it('the decision survives its server killed -9 right after it committed', async () => {
    const pid = await postmasterPid(server('a'));
    cluster.onEvent = (e) => {
      if (e.type === 'transaction' && e.phase === 'decide' && e.step === 'done') killServerNow(pid);
    };
    // Committed: the decision returned before the kill, and COMMIT PREPARED on b needs nothing from a.
    await router.withShards([{ shard: 0 }, { shard: 1 }], async ([x, y]) => {
      await x?.query(`INSERT INTO marks (tag) VALUES ('k2')`);
      await y?.query(`INSERT INTO marks (tag) VALUES ('k2')`);
    });
    cluster.onEvent = () => {};
    await killServer(server('a'), pid);
    await restart('a');
    assert.deepEqual(await shardsWith('k2'), [0, 1]);
  });
});

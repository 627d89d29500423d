import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createRouter } from 'shardflake';
import { startCli } from '../support/cli.js';
import { crashRouterAt, txidOf, until, useCrashCluster } from './support.js';

// a holds the catalog and shard 0, b shard 1, c shard 2 (support.ts, useCrashCluster).
const cluster = await useCrashCluster();
const { config, configFile, shardsWith, ours, decisionOf } = cluster;

describe('a router killed -9 during a commit across three servers', () => {
  it('after the first PREPARE: nothing is visible, and `cluster recover` rolls back what was prepared', async () => {
    const at = await crashRouterAt(configFile, 'after-first-prepare', [0, 1, 2], 'p1');
    // The exact point: one participant prepared, no decision committed, nothing visible anywhere.
    assert.ok((await ours(at.server as 'b' | 'c')).includes(at.gid), 'the first participant is prepared');
    assert.equal(await decisionOf(txidOf(at.gid)), undefined);
    assert.deepEqual(await shardsWith('p1'), []);

    const run = startCli(['cluster', 'recover', '--config', configFile, '--in-doubt-after', '0']);
    const done = await run.done;
    assert.equal(done.code, 0, done.stderr);
    assert.match(done.stdout, /committed 0, rolled back [12], still in doubt 0/);
    assert.match(done.stdout, new RegExp(`rolled back {2}${at.gid} {2}on ${at.server}`));
    assert.deepEqual([await ours('b'), await ours('c')], [[], []]);
    assert.deepEqual(await shardsWith('p1'), []);
    // The tombstone: this transaction can never commit now.
    assert.equal(await decisionOf(txidOf(at.gid)), 'abort');
  });

  it('after the decision: only the last agent shows it, and a router settles the rest by itself within seconds', async () => {
    const at = await crashRouterAt(configFile, 'after-decision', [0, 1, 2], 'p2');
    // The exact point: the decision is committed on a with a's row; b and c are still prepared.
    const [gidB] = await ours('b');
    const [gidC] = await ours('c');
    assert.ok(gidB && gidC, 'b and c are prepared');
    assert.equal(await decisionOf(txidOf(gidB)), 'commit');
    assert.equal(at.server, 'a');
    // Atomic, not isolated: a reader on a sees the commit before readers on b and c do.
    assert.deepEqual(await shardsWith('p2'), [0]);

    const started = Date.now();
    const recovering = await createRouter(config, {
      transactions: { recoveryDelayMs: 0, recoveryIntervalMs: 200, inDoubtAfterMs: 1000 },
    });
    try {
      await until(async () => (await ours('b')).length + (await ours('c')).length === 0, 15_000, 'recovery');
    } finally {
      await recovering.close();
    }
    const tookMs = Date.now() - started;
    assert.ok(
      tookMs < 15_000,
      `settled by the background recovery in ${tookMs} ms (the documented bound: ~15 s)`,
    );
    assert.deepEqual(await shardsWith('p2'), [0, 1, 2]);
  });
});

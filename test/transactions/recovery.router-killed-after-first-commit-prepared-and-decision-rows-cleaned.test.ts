import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { startCli } from '../support/cli.js';
import { crashRouterAt, until, useCrashCluster } from './support.js';

// a holds the catalog and shard 0, b shard 1, c shard 2 (support.ts, useCrashCluster).
const cluster = await useCrashCluster();
const { urls, configFile, shardsWith, ours, router } = cluster;

describe('a router killed -9 during a commit across three servers', () => {
  it('after the first COMMIT PREPARED: recoverTransactions commits the participant still prepared', async () => {
    const at = await crashRouterAt(
      configFile,
      'after-first-commit-prepared',
      [0, 1, 2],
      'p3',
      async (first) => {
        // The first COMMIT PREPARED was sent before the child stopped: wait until its server has done it.
        await until(
          async () => !(await ours(first.server as 'b' | 'c')).includes(first.gid),
          10_000,
          'first commit',
        );
      },
    );
    const other = at.server === 'b' ? 'c' : 'b';
    const left = await ours(other);
    assert.equal(left.length, 1, `the second participant (${other}) is still prepared`);
    assert.deepEqual(await shardsWith('p3'), [0, at.server === 'b' ? 1 : 2].sort());

    const report = await router.recoverTransactions();
    assert.deepEqual(
      report.committed.map((g) => [g.gid, g.server]),
      [[left[0], other]],
    );
    assert.deepEqual(report.rolledBack, []);
    assert.deepEqual(await shardsWith('p3'), [0, 1, 2]);
    assert.deepEqual([await ours('a'), await ours('b'), await ours('c')], [[], [], []]);
  });

  it('decision rows go once nothing needs them, and a second recover finds nothing to do', async () => {
    const client = await connect(urls.a);
    try {
      // Make every row old enough to be cleaned (the default retention is minutes).
      const aged = await client.query(
        `UPDATE shardflake.transactions SET decided_at = now() - interval '2 days'`,
      );
      // The commit killed above left its decision row (and nothing in this file made others).
      assert.ok((aged.rowCount ?? 0) >= 1, 'the crashed commit left a decision row');
      const report = await router.recoverTransactions();
      assert.deepEqual([report.committed, report.rolledBack, report.waiting], [[], [], []]);
      assert.equal(report.cleaned, aged.rowCount, 'every aged decision row was cleaned');
      const left = await client.query('SELECT count(*)::int AS n FROM shardflake.transactions');
      assert.equal(left.rows[0]?.n, 0);
    } finally {
      await client.end();
    }
    const run = await startCli(['cluster', 'recover', '--config', configFile]).done;
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /committed 0, rolled back 0, still in doubt 0/);
  });
});

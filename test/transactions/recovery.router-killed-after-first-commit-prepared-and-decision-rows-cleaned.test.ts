import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRouter, type Router } from 'shardflake';
import { validateConfig } from '../../packages/shardflake/src/cluster/config.js';
import { initCluster } from '../../packages/shardflake/src/cluster/init.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { crashRouterAt, preparedGids, until } from './support.js';

// Three servers, one shard each: a transaction over shards 0, 1, 2 has a (the first server by name) as its last
// agent and prepares b and c. A router child is killed -9 at each step of the commit; recovery must then leave
// every transaction on all three shards or on none.
const servers = await useServers(3);
const urls = Object.fromEntries(servers.map((s) => [s.name, s.url])) as Record<'a' | 'b' | 'c', string>;
const raw = {
  servers: urls,
  catalog: 'a',
  logicalShards: 3,
  epoch: '2024-01-01T00:00:00Z',
  tables: { marks: 'CREATE TABLE marks (id bigint PRIMARY KEY DEFAULT next_id(), tag text NOT NULL)' },
};
const config = validateConfig(raw, 'test-config');
const dir = await mkdtemp(join(tmpdir(), 'shardflake-tx-'));
const configFile = join(dir, 'cluster.json');
let router: Router;

/** On which shards the tag's row is visible. */
async function shardsWith(tag: string): Promise<number[]> {
  const found: number[] = [];
  for (let shard = 0; shard < 3; shard++) {
    const n = await router.withShard({ shard }, async (s) => {
      const { rows } = await s.query<{ n: bigint }>('SELECT count(*) AS n FROM marks WHERE tag = $1', [tag]);
      return Number(rows[0]?.n);
    });
    if (n > 0) found.push(shard);
  }
  return found;
}

async function _decisionOf(txid: string): Promise<string | undefined> {
  const client = await connect(urls.a);
  try {
    const { rows } = await client.query('SELECT outcome FROM shardflake.transactions WHERE txid = $1', [
      txid,
    ]);
    return rows[0]?.outcome;
  } finally {
    await client.end();
  }
}

const _txidOf = (gid: string) => gid.split(':')[2] as string;
const ours = async (server: 'a' | 'b' | 'c') =>
  (await preparedGids(urls[server])).filter((g) => g.startsWith('sf:'));

before(async () => {
  await writeFile(configFile, JSON.stringify(raw));
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false } });
  assert.deepEqual(
    [0, 1, 2].map((s) => router.placement(s).server),
    ['a', 'b', 'c'],
  );
});
after(async () => {
  await router?.close();
  await rm(dir, { recursive: true, force: true });
});

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

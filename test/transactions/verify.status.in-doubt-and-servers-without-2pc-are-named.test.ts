import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRouter, type Router, telemetryHook } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { testTelemetry } from '../support/telemetry.js';
import { crashRouterAt, preparedGids } from './support.js';

// a and b take part in transactions across servers; c cannot (max_prepared_transactions = 0).
const [a, b] = await useServers(2);
const [c] = await useServers(1, { settings: { max_prepared_transactions: 0 } });
const raw = {
  servers: { a: a?.url, b: b?.url, c: c?.url },
  catalog: 'a',
  logicalShards: 3,
  epoch: '2024-01-01T00:00:00Z',
  tables: { marks: 'CREATE TABLE marks (id bigint PRIMARY KEY DEFAULT next_id(), tag text NOT NULL)' },
};
const config = validateConfig(raw, 'test-config');
const dir = await mkdtemp(join(tmpdir(), 'shardflake-tx-'));
const configFile = join(dir, 'cluster.json');
let router: Router;
let gid = '';

before(async () => {
  await writeFile(configFile, JSON.stringify(raw));
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false } });
});
after(async () => {
  await router?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('in-doubt transactions and servers without prepared transactions are named', () => {
  it('verify passes on a healthy cluster of servers that can all prepare', async () => {
    const healthy = join(dir, 'healthy.json');
    await writeFile(healthy, JSON.stringify({ ...raw, servers: { a: a?.url, b: b?.url } }));
    const run = await startCli(['cluster', 'verify', '--config', healthy]).done;
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^ok {4}in-doubt transactions/m);
    assert.match(run.stdout, /^ok {4}two-phase commit/m);
  });

  it('verify exits 1 naming the in-doubt transaction, its server, and the server that cannot prepare', async () => {
    await crashRouterAt(configFile, 'after-decision', [0, 1], 'doubt');
    [gid = ''] = await preparedGids(b?.url as string);
    assert.match(gid, /^sf:/);

    const run = await startCli(['cluster', 'verify', '--config', configFile]).done;
    assert.equal(run.code, 1);
    assert.equal(run.stderr, 'shardflake: cluster verify found 2 problems\n');
    assert.match(run.stdout, /^FAIL {2}in-doubt transactions/m);
    assert.ok(
      run.stdout.includes(`server b, gid ${gid}: prepared `) && run.stdout.includes('decided commit'),
      run.stdout,
    );
    assert.match(run.stdout, /server c: max_prepared_transactions = 0/);

    const json = await startCli(['cluster', 'verify', '--config', configFile, '--json']).done;
    assert.equal(json.code, 1);
    const report = JSON.parse(json.stdout);
    assert.equal(report.ok, false);
    assert.deepEqual(
      report.problems.map((p: { check: string; where: string }) => [p.check, p.where]),
      [
        ['in-doubt transactions', `server b, gid ${gid}`],
        ['two-phase commit', 'server c'],
      ],
    );
  });

  it('cluster status lists the in-doubt transaction and the server that cannot take part, as text and JSON', async () => {
    const json = await startCli(['cluster', 'status', '--config', configFile, '--json']).done;
    assert.equal(json.code, 0, json.stderr);
    const status = JSON.parse(json.stdout);
    assert.deepEqual(status.transactions.cannotTakePart, ['c']);
    assert.deepEqual(
      status.transactions.inDoubt.map((g: { gid: string; server: string; decision: string }) => [
        g.gid,
        g.server,
        g.decision,
      ]),
      [[gid, 'b', 'commit']],
    );
    const text = await startCli(['cluster', 'status', '--config', configFile]).done;
    assert.match(
      text.stdout,
      /transactions across servers: 1 prepared in doubt; cannot take part \(max_prepared_transactions = 0\): c/,
    );
    assert.ok(text.stdout.includes(`${gid} on b:`));
    assert.match(text.stdout, /warning: server c has max_prepared_transactions = 0/);

    // Settled: verify is back to the one problem that stays (server c).
    await router.recoverTransactions();
    const after = await startCli(['cluster', 'verify', '--config', configFile, '--json']).done;
    assert.deepEqual(
      JSON.parse(after.stdout).problems.map((p: { check: string }) => p.check),
      ['two-phase commit'],
    );
  });

  it('each two-phase step is an OpenTelemetry span named for its phase, on its server', async () => {
    const { exporter, tracer, meter } = testTelemetry();
    const traced = await createRouter(config, {
      telemetry: false,
      onEvent: telemetryHook({ tracer, meter }),
      transactions: { recovery: false },
    });
    try {
      await traced.withShards([{ shard: 0 }, { shard: 1 }], async (sessions) => {
        for (const s of sessions) await s.query(`INSERT INTO marks (tag) VALUES ('traced')`);
      });
    } finally {
      await traced.close();
    }
    const spans = exporter.getFinishedSpans().map((s) => [s.name, s.attributes['shardflake.server']]);
    assert.deepEqual(spans, [
      ['shardflake 2pc prepare', 'b'],
      ['shardflake 2pc decide', 'a'],
      ['shardflake 2pc commit-prepared', 'b'],
      ['shardflake withShards', ['a', 'b']],
    ]);
  });
});

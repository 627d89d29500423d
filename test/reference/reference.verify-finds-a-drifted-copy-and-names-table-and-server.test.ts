import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRouter } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { clusterAccess } from '../../packages/shardflake/src/recovery/cluster-access.js';
import { referenceCheck, verifyReference } from '../../packages/shardflake/src/reference/verify.js';
import { closeAll, connectAll } from '../../packages/shardflake/src/topology/connections.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);
const raw = {
  servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
  catalog: 'a',
  logicalShards: 2,
  tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id())' },
  referenceTables: {
    plans: 'CREATE TABLE plans (id int PRIMARY KEY, name text NOT NULL)',
    countries: 'CREATE TABLE countries (code text PRIMARY KEY)',
  },
};
const config = validateConfig(raw, 'test-config');
const dir = await mkdtemp(join(tmpdir(), 'shardflake-verify-'));
const configFile = join(dir, 'cluster.json');
await writeFile(configFile, JSON.stringify(raw));
after(() => rm(dir, { recursive: true, force: true }));
const clients = await connectAll(config);
after(() => closeAll(clients));

/** Runs SQL on server i as the superuser, around the guard (what a drifted copy takes). */
async function around(i: number, sql: string): Promise<void> {
  const c = await connect(servers[i]?.url as string);
  try {
    await c.query(`BEGIN; SELECT shardflake_reference._shardflake_begin_write(); ${sql}; COMMIT`);
  } finally {
    await c.end();
  }
}
const problems = async () =>
  (await verifyReference(config, clients)).map((p) => [p.server, p.table, p.message]);

before(async () => {
  await initCluster(config);
  const router = await createRouter(config);
  try {
    await router.withReference(async (s) => {
      await s.query("INSERT INTO plans VALUES (1, 'free'), (2, 'pro')");
      await s.query("INSERT INTO countries VALUES ('FR'), ('JP')");
    });
  } finally {
    await router.close();
  }
});

describe('the reference check of cluster verify', () => {
  it('finds nothing wrong with copies written through withReference', async () => {
    assert.deepEqual(await problems(), []);
  });

  it('names the table and the server of a copy whose rows differ, whether in count or in a value', async () => {
    await around(1, "UPDATE shardflake_reference.plans SET name = 'Pro' WHERE id = 2");
    const [found] = await problems();
    assert.equal(found?.[0], 'b');
    assert.equal(found?.[1], 'plans');
    assert.match(
      found?.[2] as string,
      /^reference table plans differs on server b: 2 rows \(checksum \w+\) against 2 rows \(checksum \w+\) on server a$/,
    );
    await around(1, "UPDATE shardflake_reference.plans SET name = 'pro' WHERE id = 2");
    assert.deepEqual(await problems(), []);
    await around(0, "INSERT INTO shardflake_reference.countries VALUES ('DE')");
    assert.deepEqual(
      (await problems()).map((p) => [p[0], p[1]]),
      [['b', 'countries']],
    );
    await around(0, "DELETE FROM shardflake_reference.countries WHERE code = 'DE'");
  });

  it('reports a lost guard, an unfilled copy and a shard table hiding a reference table', async () => {
    const c = await connect(servers[1]?.url as string);
    try {
      await c.query('ALTER TABLE shardflake_reference.countries DISABLE TRIGGER _shardflake_guard');
      await c.query('UPDATE shardflake_reference._shardflake_state SET synced = false');
      await c.query('CREATE TABLE shard_0001.plans (id int)');
      const found = await problems();
      assert.equal(found.length, 3, JSON.stringify(found));
      assert.ok(found.every((p) => p[0] === 'b'));
      assert.match(found.map((p) => p[2]).join('\n'), /never filled/);
      assert.match(found.map((p) => p[2]).join('\n'), /countries on server b has lost its write guard/);
      assert.match(
        found.map((p) => p[2]).join('\n'),
        /shard schema shard_0001 on server b has its own plans/,
      );
    } finally {
      await c.query(`ALTER TABLE shardflake_reference.countries ENABLE TRIGGER _shardflake_guard;
                     UPDATE shardflake_reference._shardflake_state SET synced = true; DROP TABLE shard_0001.plans`);
      await c.end();
    }
    assert.deepEqual(await problems(), []);
  });

  it("as cluster verify's check, on the pooled connections it is given: where is the server and the table", async () => {
    await around(1, 'DELETE FROM shardflake_reference.plans WHERE id = 1');
    const pools = clusterAccess(config, 'verify test');
    try {
      const found = await referenceCheck.run(config, pools);
      assert.deepEqual(
        found.map((p) => [p.check, p.where]),
        [['reference tables', 'server b, table plans']],
      );
      assert.match(found[0]?.what ?? '', /1 rows .* against 2 rows/);
      // The command: the problem on stdout with where it is, one line on stderr, exit 1; then clean, exit 0.
      const run = await startCli(['cluster', 'verify', '--config', configFile]).done;
      assert.equal(run.code, 1, run.stderr);
      assert.equal(run.stderr, 'shardflake: cluster verify found 1 problem\n');
      assert.match(run.stdout, /^FAIL {2}reference tables/m);
      assert.match(run.stdout, /server b, table plans: reference table plans differs on server b/);
      const json = JSON.parse(
        (await startCli(['cluster', 'verify', '--config', configFile, '--json']).done).stdout,
      );
      assert.deepEqual(
        json.problems.map((p: { check: string; where: string }) => [p.check, p.where]),
        [['reference tables', 'server b, table plans']],
      );
    } finally {
      await pools.close();
      await around(1, "INSERT INTO shardflake_reference.plans VALUES (1, 'free')");
    }
    const clean = await startCli(['cluster', 'verify', '--config', configFile]).done;
    assert.equal(clean.code, 0, clean.stdout + clean.stderr);
    assert.match(clean.stdout, /^ok {4}reference tables/m);
  });
});

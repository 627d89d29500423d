import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { clusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { sqlRows, useServers } from '../support/postgres.js';

/**
 * Issue 32, item 3: a failed first `cluster init` locked in its broken template. The first run records the
 * cluster row and the schema history before it creates any shard; when every shard batch then failed (a typo in a
 * table template), the corrected config was refused ("history disagrees … change tables with a migration"),
 * although no shard existed, and the only way out was dropping the `shardflake` schema by hand.
 *
 * Now, while the catalog places no shard and no server holds one, init takes the config as it is: history, layout,
 * epoch and shard count. Once a shard exists, the recorded history is the truth again and a changed template is
 * refused, as before.
 */
const servers = await useServers(1);
let databases = 0;

/** A fresh database on the server for each test: a catalog of its own. */
async function freshUrl(): Promise<string> {
  const name = `init_${++databases}`;
  const url = servers[0]?.url as string;
  await sqlRows(url, `CREATE DATABASE ${name}`);
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

const configOn = (url: string, overrides: Record<string, unknown>) =>
  validateConfig(
    {
      servers: { a: url },
      catalog: 'a',
      logicalShards: 8,
      epoch: '2024-01-01T00:00:00Z',
      tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text)' },
      ...overrides,
    },
    'cluster.json',
  );

const typo = { tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note txet)' } };

test('a first init that failed on a typo in a table template takes the corrected config, with another shard count and epoch too', async () => {
  const url = await freshUrl();
  await assert.rejects(initCluster(configOn(url, typo)), /type "txet" does not exist/);
  assert.deepEqual(await sqlRows(url, 'SELECT shard FROM shardflake.shards'), [], 'no shard was made');

  const fixed = configOn(url, { logicalShards: 16, epoch: '2024-06-01T00:00:00Z' });
  const result = await initCluster(fixed);
  assert.equal(result.created, 16);
  const status = await clusterStatus(fixed);
  assert.equal(status.logicalShards, 16);
  assert.equal(status.epoch, '2024-06-01T00:00:00.000Z');
  assert.deepEqual(status.migrationDifferences, [], 'the cluster keeps the corrected history');
  const columns = await sqlRows<{ type: string }>(
    url,
    "SELECT data_type AS type FROM information_schema.columns WHERE table_schema = 'shard_0015' AND column_name = 'note'",
  );
  assert.deepEqual(columns, [{ type: 'text' }]);
});

test('a first init that failed on a typo in a migration takes the corrected migration', async () => {
  const url = await freshUrl();
  const migration = (sql: string) => ({ migrations: [{ version: 1, name: 'tags', sql }] });
  await assert.rejects(
    initCluster(configOn(url, migration('ALTER TABLE items ADD COLUMN tags txet[]'))),
    /type "txet\[\]" does not exist|type "txet" does not exist/,
  );
  const result = await initCluster(configOn(url, migration('ALTER TABLE items ADD COLUMN tags text[]')));
  assert.equal(result.created, 8);
  const history = await sqlRows<{ version: number; sql: string }>(
    url,
    'SELECT version, sql FROM shardflake.migrations ORDER BY version',
  );
  assert.deepEqual(
    history.map((h) => h.version),
    [0, 1],
  );
  assert.match(history[1]?.sql as string, /tags text\[\]/);
});

test('once a shard exists the recorded history is the truth: a changed template is refused and changes nothing', async () => {
  const url = await freshUrl();
  await initCluster(configOn(url, {}));
  const before = await sqlRows(url, 'SELECT version, checksum FROM shardflake.migrations ORDER BY version');
  const changed = configOn(url, {
    tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text, n int)' },
  });
  await assert.rejects(initCluster(changed), (e: unknown) => {
    assert.ok(isShardflakeError(e, 'INVALID_CONFIG'), String(e));
    assert.match(e.message, /change tables with a migration/);
    return true;
  });
  await assert.rejects(initCluster(configOn(url, { logicalShards: 16 })), /logicalShards 8/);
  assert.deepEqual(
    await sqlRows(url, 'SELECT version, checksum FROM shardflake.migrations ORDER BY version'),
    before,
  );
});

test('a first init that failed on a typo in a reference table takes the corrected one', async () => {
  const url = await freshUrl();
  const reference = (sql: string) => ({ referenceTables: { plans: sql } });
  await assert.rejects(
    initCluster(configOn(url, reference('CREATE TABLE plans (id int PRIMARY KEY, name txet)'))),
    /type "txet" does not exist/,
  );
  const result = await initCluster(
    configOn(url, reference('CREATE TABLE plans (id int PRIMARY KEY, name text)')),
  );
  assert.equal(result.created, 8);
  assert.deepEqual(
    await sqlRows(url, "SELECT to_regclass('shardflake_reference.plans') IS NOT NULL AS there"),
    [{ there: true }],
  );
});

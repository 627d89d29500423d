import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { CATALOG_SQL_VERSION } from '../../packages/shardflake/src/catalog/shards.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * Catalog SQL version 2 (issue 33, item 4) adds the index a router's refresh reads changed shards through. A
 * catalog made by version 1 gets it from the next `cluster migrate` or `cluster init`, which record the new
 * version; a router works on either (the index only makes its read proportional to the changed rows).
 */
const servers = await useServers(1);
const config = testConfig(servers, { logicalShards: 8 });

async function catalogState(): Promise<{ version: number; indexed: boolean }> {
  const c = await connect(defined(servers[0]).url);
  try {
    const { rows } = await c.query(
      `SELECT catalog_sql_version AS version,
              to_regclass('shardflake.shards_changed_in_version') IS NOT NULL AS indexed
         FROM shardflake.cluster`,
    );
    return rows[0] as { version: number; indexed: boolean };
  } finally {
    await c.end();
  }
}

async function makeVersionOne(): Promise<void> {
  const c = await connect(defined(servers[0]).url);
  await c.query('DROP INDEX shardflake.shards_changed_in_version');
  await c.query('UPDATE shardflake.cluster SET catalog_sql_version = 1');
  await c.end();
}

test('a version-1 catalog gets the changed-shards index from migrate and from init, and a router reads it either way', async () => {
  await initCluster(config);
  assert.deepEqual(await catalogState(), { version: CATALOG_SQL_VERSION, indexed: true });

  await makeVersionOne();
  const router = await createRouter(config);
  const id = await router.insert('photos', { user_id: 1n, caption: 'on a version-1 catalog' }, { key: 1n });
  await migrateCluster(config);
  assert.deepEqual(await catalogState(), { version: CATALOG_SQL_VERSION, indexed: true });
  assert.equal((await router.get<{ caption: string }>('photos', id))?.caption, 'on a version-1 catalog');
  await router.close();

  await makeVersionOne();
  await initCluster(config);
  assert.deepEqual(await catalogState(), { version: CATALOG_SQL_VERSION, indexed: true });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { readLookups } from '../../packages/shardflake/src/catalog/lookups.js';
import { buildLookups } from '../../packages/shardflake/src/lookups/build.js';
import { CHANGES_TABLE } from '../../packages/shardflake/src/lookups/ddl.js';
import { verifyLookups } from '../../packages/shardflake/src/lookups/verify.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { closeAll, connectAll } from '../../packages/shardflake/src/topology/connections.js';
import { useServers } from '../support/postgres.js';
import { usersWithEmailLookup } from './cluster-config.js';

/**
 * The direct insert (lookups/insert-beside.ts): on a cluster whose capture functions let it through (catalog
 * `direct_insert`), a placed insert writes its row and its entries in one statement, and the capture trigger writes
 * no change row. Watched by a trigger of this test on every shard's change table, which counts the change rows
 * written (the capture trigger's own work, whatever path the router took).
 */
const servers = await useServers(2);
const config = usersWithEmailLookup(servers);
const SHARDS = [0, 1, 2, 3];
let admin: Map<string, pg.Client>;

before(async () => {
  await initCluster(config);
  admin = await connectAll(config);
  const catalog = admin.get(config.catalog) as pg.Client;
  await catalog.query('CREATE TABLE public.change_rows_seen (n int)');
  for (const server of admin.keys()) {
    if (server !== config.catalog)
      await (admin.get(server) as pg.Client).query('CREATE TABLE public.change_rows_seen (n int)');
  }
});
after(async () => {
  await closeAll(admin);
});

/** Runs `sql(schema)` on every shard's server. */
async function onEveryShard(router: Router, sql: (schema: string) => string): Promise<void> {
  for (const shard of SHARDS) {
    const { server, schema } = router.placement(shard);
    await (admin.get(server) as pg.Client).query(sql(schema));
  }
}

async function changeRowsSeen(): Promise<number> {
  let n = 0;
  for (const client of admin.values())
    n += Number((await client.query('SELECT count(*)::int AS n FROM public.change_rows_seen')).rows[0].n);
  return n;
}

async function withRouter<T>(fn: (router: Router) => Promise<T>): Promise<T> {
  const router = await createRouter(config, { transactions: { recovery: false } });
  try {
    return await fn(router);
  } finally {
    await router.close();
  }
}

describe('an insert placed beside its entry', () => {
  before(async () => {
    await withRouter((router) =>
      onEveryShard(
        router,
        (
          schema,
        ) => `CREATE FUNCTION ${qualified(schema, 'count_change_rows')}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.change_rows_seen VALUES (1); RETURN NULL; END $$;
CREATE TRIGGER count_change_rows AFTER INSERT ON ${qualified(schema, CHANGES_TABLE)} FOR EACH ROW EXECUTE FUNCTION ${qualified(schema, 'count_change_rows')}();
CREATE FUNCTION ${qualified(schema, 'rewrite_email')}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.email LIKE '%@rewrite.test' THEN NEW.email := NEW.email || '.rewritten'; END IF; RETURN NEW; END $$;
CREATE TRIGGER rewrite_email BEFORE INSERT ON ${qualified(schema, 'users')} FOR EACH ROW EXECUTE FUNCTION ${qualified(schema, 'rewrite_email')}()`,
      ),
    );
  });

  it('on a cluster made by this version: row and entry in one statement, no change row; the value found, a second claim refused', async () => {
    const lookups = await readLookups(admin.get(config.catalog) as pg.Client);
    assert.equal(lookups.get('user_email')?.directInsert, true, 'init records direct_insert');
    await withRouter(async (router) => {
      const before = await changeRowsSeen();
      const id = await router.insert(
        'users',
        { name: 'ann', email: 'ann@direct.test' },
        { lookup: 'user_email' },
      );
      assert.equal(await changeRowsSeen(), before, 'no change row written');
      assert.equal((await router.lookup('user_email', 'ann@direct.test'))?.id, id);
      await assert.rejects(
        router.insert('users', { name: 'bob', email: 'ann@direct.test' }, { lookup: 'user_email' }),
        (e: unknown) => isShardflakeError(e, 'UNIQUE_VIOLATION') && !(e as Error).message.includes('ann@'),
      );
    });
    assert.deepEqual(await verifyLookups(config, admin), []);
  });

  it('a row whose value its table rewrites is not what was predicted: nothing of the direct statement commits, and the ordinary way writes the entry of the stored value', async () => {
    await withRouter(async (router) => {
      const before = await changeRowsSeen();
      const id = await router.insert(
        'users',
        { name: 'cy', email: 'cy@rewrite.test' },
        { lookup: 'user_email' },
      );
      assert.ok(
        (await changeRowsSeen()) > before,
        'the ordinary way: the capture trigger wrote the change row',
      );
      assert.equal((await router.lookup('user_email', 'cy@rewrite.test.rewritten'))?.id, id);
      assert.equal(await router.lookup('user_email', 'cy@rewrite.test'), null);
      const { rows } = await router.sql(`SELECT email FROM users WHERE email LIKE 'cy@rewrite.test%'`);
      assert.deepEqual(
        rows,
        [{ email: 'cy@rewrite.test.rewritten' }],
        'one row: the direct attempt left nothing',
      );
    });
    assert.deepEqual(await verifyLookups(config, admin), []);
  });

  it('a lookup built by an older version (no direct_insert) keeps the change rows until cluster migrate brings its capture functions up to date', async () => {
    const catalog = admin.get(config.catalog) as pg.Client;
    await catalog.query(`UPDATE shardflake.lookups SET direct_insert = false WHERE name = 'user_email'`);
    await withRouter(async (router) => {
      const before = await changeRowsSeen();
      await router.insert('users', { name: 'dee', email: 'dee@old.test' }, { lookup: 'user_email' });
      assert.ok((await changeRowsSeen()) > before, 'an older cluster: change rows, as before');
    });
    const reports = await buildLookups(config);
    assert.equal(reports[0]?.alreadyBuilt, true);
    assert.equal(
      (await readLookups(catalog)).get('user_email')?.directInsert,
      true,
      'migrate records direct_insert',
    );
    await withRouter(async (router) => {
      const before = await changeRowsSeen();
      await router.insert('users', { name: 'eve', email: 'eve@new.test' }, { lookup: 'user_email' });
      assert.equal(await changeRowsSeen(), before, 'after migrate: the direct insert');
    });
    assert.deepEqual(await verifyLookups(config, admin), []);
  });
});

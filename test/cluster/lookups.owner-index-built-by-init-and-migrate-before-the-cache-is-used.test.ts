import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type pg from 'pg';
import { createRouter } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { queriesDuring } from '../support/queries.js';
import { testConfig, usersWithEmailLookup } from './cluster-config.js';

/**
 * The owner index (lookups/ddl.ts) that the owner cache reads through:
 * - `cluster init` makes it in every shard of a unique lookup (the plan of a read by value uses it), with the
 *   cache's check function, and records `owner_index` in the catalog;
 * - a cluster whose lookup was built before the index existed (index and function dropped, the catalog's column
 *   too — a
 *   catalog no migrate of this version has touched): a router reads it and does not use the cache (every lookup
 *   two reads), `cluster migrate` builds the index in every shard and records it, and a router then answers a
 *   remembered value with one read;
 * - a unique lookup on a column whose text form is not immutable (timestamptz) is refused at init, naming it.
 */
const servers = await useServers(2);
const [a, b] = servers;
const config = usersWithEmailLookup([defined(a)]);
let admin: pg.Client;

before(async () => {
  await initCluster(config);
  admin = await connect(defined(a).url);
});
after(async () => {
  await admin?.end();
});

async function indexedShards(): Promise<number> {
  const { rows } = await admin.query(
    `SELECT count(*)::int AS n FROM pg_indexes WHERE indexname = '_shardflake_owner_user_email'
        AND schemaname = ANY($1::text[])`,
    [[0, 1, 2, 3].map((s) => shardSchema(config, s))],
  );
  return (rows[0] as { n: number }).n;
}

/**
 * Queries of a new router's lookup of a value it has found before (the fewest of three: a new router's own
 * background work, its map's LISTEN and its first look at each server, may add one to a count).
 */
async function laterLookup(): Promise<number> {
  const router = await createRouter(config, { transactions: { recovery: false } });
  try {
    const email = `u${Math.random()}@x`;
    await router.insert('users', { name: 'u', email }, { key: 2 });
    await router.lookup('user_email', email);
    const counts: number[] = [];
    for (let i = 0; i < 3; i++)
      counts.push((await queriesDuring(() => router.lookup('user_email', email))).queries);
    return Math.min(...counts);
  } finally {
    await router.close();
  }
}

test('init makes the owner index in every shard; a lookup built before it gets it from migrate, then the cache', async () => {
  assert.equal(await indexedShards(), 4);
  const plan = await admin.query(
    `EXPLAIN SELECT * FROM "${shardSchema(config, 0)}".users WHERE email::text = 'x'`,
  );
  assert.match(JSON.stringify(plan.rows), /_shardflake_owner_user_email/);
  assert.equal(await laterLookup(), 1);

  // As a cluster built by an earlier version left it.
  for (let s = 0; s < 4; s++)
    await admin.query(
      `DROP INDEX "${shardSchema(config, s)}"._shardflake_owner_user_email;
       DROP FUNCTION "${shardSchema(config, s)}"._shardflake_none_prepared()`,
    );
  await admin.query('ALTER TABLE shardflake.lookups DROP COLUMN owner_index');
  // Without the index the cache is not used: the entry and the owner, two reads at least (one with the cache).
  assert.ok((await laterLookup()) >= 2);

  const result = await migrateCluster(config);
  assert.deepEqual(
    result.lookups.map((l) => [l.lookup, l.alreadyBuilt, l.ownerIndexBuilt]),
    [['user_email', true, true]],
  );
  assert.equal(await indexedShards(), 4);
  assert.equal(await laterLookup(), 1);
  const again = await migrateCluster(config);
  assert.deepEqual(
    again.lookups.map((l) => [l.lookup, l.alreadyBuilt, l.ownerIndexBuilt]),
    [['user_email', true, false]],
  );
});

test('a unique lookup on a column whose text form depends on settings is refused, naming it', async () => {
  const events = testConfig([defined(b)], {
    logicalShards: 2,
    tables: { events: 'CREATE TABLE events (id bigint PRIMARY KEY DEFAULT next_id(), at timestamptz)' },
    lookups: { event_at: { table: 'events', column: 'at', unique: true } },
  });
  await assert.rejects(initCluster(events), /unique lookup event_at needs an index on events\.at::text/);
});

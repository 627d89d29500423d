import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { bumpMapVersion } from '../../packages/shardflake/src/catalog/shards.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { createRouter, type Router } from '../../packages/shardflake/src/router/router.js';
import {
  CATALOG_APPLICATION_NAME,
  catalogConnection,
} from '../../packages/shardflake/src/routing/catalog-connection.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * Issue 33, item 4: each router held about 4 catalog connections (a pool of 2 for map reads, one LISTEN, and
 * more), so 100 routers needed ~400 where PostgreSQL allows 100 by default. Now a router's catalog traffic — map
 * reads, the LISTEN, fence-on-discovery placement reads — shares one connection. Counted in pg_stat_activity on
 * the catalog server after typical use by 10 routers at once: inserts, gets, a withShards across servers, and a
 * map version change every router re-reads.
 */
// pg prints a DeprecationWarning (once per process) when a query is given to a client whose queue is not empty.
const warnings: string[] = [];
process.on('warning', (warning) => warnings.push(warning.message));

const servers = await useServers(2);
const config = testConfig(servers, { logicalShards: 16 });
const routers: Router[] = [];
const N = 10;

before(async () => {
  await initCluster(config);
  for (let i = 0; i < N; i++) routers.push(await createRouter(config));
});
after(async () => {
  await Promise.all(routers.map((r) => r.close()));
});

async function backendsByName(): Promise<Map<string, number>> {
  const c = await connect(defined(servers[0]).url);
  try {
    const { rows } = await c.query(
      `SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1`,
    );
    return new Map((rows as { name: string; n: number }[]).map((r) => [r.name, r.n]));
  } finally {
    await c.end();
  }
}

test(`${N} routers after inserts, gets, withShards and a map change hold ${N} catalog connections, one each`, async () => {
  const ids = await Promise.all(
    routers.map(async (router, i) => {
      const id = await router.insert('photos', { user_id: BigInt(i), caption: `r${i}` }, { key: BigInt(i) });
      assert.equal((await router.get<{ caption: string }>('photos', id))?.caption, `r${i}`);
      // Shards 0 and 15 live on different servers: a transaction across both.
      const names = await router.withShards([{ shard: 0 }, { shard: 15 }], async (sessions) =>
        sessions.map((s) => s.server),
      );
      assert.deepEqual(names, ['a', 'b']);
      return id;
    }),
  );
  const before = routers.map((r) => r.mapVersion);
  const catalog = await connect(defined(servers[0]).url);
  await catalog.query('BEGIN');
  await bumpMapVersion(catalog);
  await catalog.query('COMMIT');
  await catalog.end();
  for (let i = 0; i < 250 && routers.some((r, j) => r.mapVersion <= (before[j] as bigint)); i++)
    await new Promise((r) => setTimeout(r, 20));
  assert.ok(
    routers.every((r, j) => r.mapVersion > (before[j] as bigint)),
    'every router heard of the change',
  );
  // Routed by the re-read map.
  await Promise.all(routers.map(async (r, i) => assert.ok(await r.get('photos', ids[i] as (typeof ids)[0]))));

  const names = await backendsByName();
  // The catalog connections: one per router, named so.
  assert.equal(names.get(CATALOG_APPLICATION_NAME), N, JSON.stringify([...names]));
  // No other connection of a router's is a catalog connection: the former LISTEN connection and map pool are gone.
  assert.equal(names.get('shardflake router listen'), undefined);
  const others = [...names.keys()].filter(
    (n) => n.startsWith('shardflake') && !['shardflake router', 'shardflake router commit'].includes(n),
  );
  assert.deepEqual(
    others.filter((n) => n !== CATALOG_APPLICATION_NAME),
    [],
    'no connection of another kind stays open on the catalog server',
  );
});

test('queries given to the catalog connection at once run one after another, in order, and pg is never handed a busy client', async () => {
  const connection = catalogConnection(defined(servers[0]).url, {
    channel: undefined,
    onNotification: () => {},
    onLost: () => {},
  });
  try {
    const finished: number[] = [];
    const answers = await Promise.all(
      [0, 1, 2, 3].map(async (i) => {
        const { rows } = await connection.reader.query(
          'SELECT $1::int AS i, pg_backend_pid() AS pid FROM pg_sleep(0.03)',
          [i],
        );
        finished.push(i);
        return rows[0] as { i: number; pid: number };
      }),
    );
    assert.deepEqual(finished, [0, 1, 2, 3]);
    assert.equal(new Set(answers.map((a) => a.pid)).size, 1);
    // A failed query does not stop the ones after it.
    const [failed, after] = await Promise.allSettled([
      connection.reader.query('SELECT 1/0'),
      connection.reader.query('SELECT 2 AS two'),
    ]);
    assert.equal(failed?.status, 'rejected');
    assert.equal(after?.status === 'fulfilled' ? after.value.rows[0]?.two : undefined, 2);
  } finally {
    await connection.close();
  }
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(
    warnings.filter((w) => /already executing a query/.test(w)),
    [],
  );
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRouter, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { moveShard, moveShards } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

// The cluster starts on server a alone; server b is added to the config later, with nothing on it.
const servers = await useServers(2);
const reference = {
  referenceTables: {
    plans: 'CREATE TABLE plans (id serial PRIMARY KEY, name text NOT NULL)',
    features: [
      'CREATE TABLE features (plan_id int NOT NULL REFERENCES plans, flag text NOT NULL, PRIMARY KEY (plan_id, flag))',
      'CREATE INDEX features_flag ON features (flag)',
    ],
  },
};
const alone = testConfig([servers[0] as (typeof servers)[number]], { logicalShards: 4, ...reference });
const grown = testConfig(servers, { logicalShards: 4, ...reference });
let router: Router;

const onB = async <T>(fn: (c: Awaited<ReturnType<typeof connect>>) => Promise<T>): Promise<T> => {
  const c = await connect(servers[1]?.url as string);
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
};

before(async () => {
  await initCluster(alone);
  const r = await createRouter(alone);
  try {
    await r.withReference(async (s) => {
      await s.query("INSERT INTO plans (name) VALUES ('free'), ('pro'), ('team')");
      await s.query("INSERT INTO features VALUES (2, 'export'), (3, 'export'), (3, 'sso')");
    });
  } finally {
    await r.close();
  }
});
after(async () => {
  await router?.close();
});

describe('a server added to the config', () => {
  it('gets the reference tables with every row, and its sequences, before the first shard moves there', async () => {
    assert.equal(
      await onB(
        async (c) => (await c.query("SELECT to_regnamespace('shardflake_reference') AS n")).rows[0]?.n,
      ),
      null,
    );
    await moveShard(grown, 1, 'b');
    const copy = await onB(async (c) => ({
      plans: (await c.query('SELECT id, name FROM shardflake_reference.plans ORDER BY id')).rows,
      features: (await c.query('SELECT count(*)::int AS n FROM shardflake_reference.features')).rows[0]?.n,
      state: (await c.query('SELECT synced, synced_from FROM shardflake_reference._shardflake_state'))
        .rows[0],
      guarded: (await c.query(`SELECT count(*)::int AS n FROM pg_trigger WHERE tgname = '_shardflake_guard'`))
        .rows[0]?.n,
    }));
    assert.deepEqual(
      copy.plans.map((r) => r.name),
      ['free', 'pro', 'team'],
    );
    assert.equal(copy.features, 3);
    assert.deepEqual(copy.state, { synced: true, synced_from: 'a' });
    assert.equal(copy.guarded, 2);

    router = await createRouter(grown);
    assert.equal(router.placement(1).server, 'b');
    const joined = await router.withShard({ shard: 1 }, async (s) => {
      const r = await s.query(
        `SELECT p.name, count(f.flag)::int AS flags FROM plans p LEFT JOIN features f ON f.plan_id = p.id
          GROUP BY p.name ORDER BY p.name`,
      );
      return r.rows;
    });
    assert.deepEqual(joined, [
      { name: 'free', flags: 0 },
      { name: 'pro', flags: 1 },
      { name: 'team', flags: 2 },
    ]);
    // Both copies go on together, sequence included: the serial ids agree, or the row counts would differ.
    await router.withReference((s) => s.query("INSERT INTO plans (name) VALUES ('enterprise')"));
    const ids = await router.withReference(
      async (s) => (await s.query('SELECT id FROM plans ORDER BY id')).rows,
    );
    assert.deepEqual(
      await onB(async (c) => (await c.query('SELECT id FROM shardflake_reference.plans ORDER BY id')).rows),
      ids,
    );
    assert.equal(ids.length, 4);
  });

  it('a later move (the set engine) to a server whose copy is current copies nothing again', async () => {
    await onB((c) =>
      c.query(
        'CREATE TABLE public.marker AS SELECT xmin::text::bigint AS x FROM shardflake_reference.plans LIMIT 1',
      ),
    );
    await moveShards(grown, [2, 3], 'b');
    const same = await onB(
      async (c) =>
        (
          await c.query(
            'SELECT (SELECT x FROM public.marker) = (SELECT xmin::text::bigint FROM shardflake_reference.plans ORDER BY id LIMIT 1) AS same',
          )
        ).rows[0]?.same,
    );
    assert.equal(same, true);
    for (const shard of [2, 3]) {
      const n = await router.withShard(
        { shard },
        async (s) => (await s.query('SELECT count(*)::int AS n FROM plans')).rows[0]?.n,
      );
      assert.equal(n, 4);
    }
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

// Two servers, four shards (0–1 on the first, 2–3 on the second), one reference table seeded by a reference
// migration: every server gets the same copy from `cluster init`.
const servers = await useServers(2);
const plans = 'CREATE TABLE plans (id int PRIMARY KEY, name text NOT NULL)';
const seed = { version: 1, name: 'seed plans', sql: "INSERT INTO plans VALUES (1, 'free'), (2, 'pro')" };
const config = testConfig(servers, {
  logicalShards: 4,
  referenceTables: { plans },
  referenceMigrations: [seed],
});
let router: Router;

async function onServer<T>(
  i: number,
  fn: (c: Awaited<ReturnType<typeof connect>>) => Promise<T>,
): Promise<T> {
  const c = await connect(servers[i]?.url as string);
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

const planRows = (i: number) =>
  onServer(i, async (c) => (await c.query('SELECT * FROM shardflake_reference.plans ORDER BY id')).rows);

function refused(code: string, sqlState: string) {
  return (e: unknown) => {
    assert.ok(isShardflakeError(e), String(e));
    assert.equal(e.code, code);
    assert.equal(e.sqlState, sqlState);
    return true;
  };
}

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 2 });
  for (const shard of [0, 1, 2, 3]) {
    await router.withShard({ shard }, (s) =>
      s.query('INSERT INTO photos (user_id, caption) VALUES ($1, $2)', [(shard % 2) + 1, `shard ${shard}`]),
    );
  }
});
after(async () => {
  await router?.close();
});

describe('reference tables in shard sessions', () => {
  it('cluster init made the same copy on every server, and every shard session joins against it by name', async () => {
    assert.deepEqual(await planRows(0), await planRows(1));
    assert.equal((await planRows(0)).length, 2);
    assert.notEqual(router.placement(0).server, router.placement(3).server);
    for (const shard of [0, 1, 2, 3]) {
      const rows = await router.withShard({ shard }, async (s) => {
        const r = await s.query(
          'SELECT p.caption, plans.name FROM photos p JOIN plans ON plans.id = p.user_id',
        );
        return r.rows;
      });
      assert.deepEqual(rows, [{ caption: `shard ${shard}`, name: shard % 2 === 0 ? 'free' : 'pro' }]);
    }
  });

  it('refuses every kind of write from a shard session, through session.query and session.client, and changes nothing', async () => {
    const before = [await planRows(0), await planRows(1)];
    for (const sql of [
      "INSERT INTO plans VALUES (3, 'team')",
      "UPDATE plans SET name = 'gratis' WHERE id = 1",
      'DELETE FROM plans',
      'TRUNCATE plans',
    ]) {
      for (const shard of [0, 3]) {
        await assert.rejects(
          router.withShard({ shard }, (s) => s.query(sql)),
          refused('REFERENCE_READ_ONLY', 'SF020'),
          `${sql} on shard ${shard}`,
        );
      }
    }
    await assert.rejects(
      router.withShard({ shard: 1 }, (s) => s.client.query("INSERT INTO plans VALUES (3, 'team')")),
      // The client's error comes out of withShard typed like session.query's (the raw error is its cause).
      refused('REFERENCE_READ_ONLY', 'SF020'),
    );
    // A setting cannot open the guard: anyone may set a custom GUC, so the guard does not look at one.
    await assert.rejects(
      router.withShard({ shard: 2 }, async (s) => {
        await s.query("SELECT set_config('shardflake.reference_write', 'on', true)");
        await s.query("UPDATE plans SET name = 'gratis'");
      }),
      refused('REFERENCE_READ_ONLY', 'SF020'),
    );
    assert.deepEqual([await planRows(0), await planRows(1)], before);
  });

  it('withShards sessions across both servers read them by name too, and cannot write them either', async () => {
    const names = await router.withShards([{ shard: 0 }, { shard: 3 }], async ([s0, s3]) => {
      const read = async (s: typeof s0) =>
        (await s?.query('SELECT name FROM plans ORDER BY id'))?.rows.map((r) => r.name);
      return [await read(s0), await read(s3)];
    });
    assert.deepEqual(names, [
      ['free', 'pro'],
      ['free', 'pro'],
    ]);
    const before = [await planRows(0), await planRows(1)];
    await assert.rejects(
      router.withShards([{ shard: 1 }, { shard: 2 }], async ([s1, s2]) => {
        await s1?.query("INSERT INTO photos (user_id, caption) VALUES (1, 'rolled back')");
        await s2?.query("UPDATE plans SET name = 'gratis'");
      }),
      refused('REFERENCE_READ_ONLY', 'SF020'),
    );
    assert.deepEqual([await planRows(0), await planRows(1)], before);
    const kept = await router.withShard(
      { shard: 1 },
      async (s) =>
        (await s.query("SELECT count(*)::int AS n FROM photos WHERE caption = 'rolled back'")).rows[0]?.n,
    );
    assert.equal(kept, 0);
  });

  it('a plain role with every privilege on the table still cannot write it, open the guard, or switch the guard off', async () => {
    await onServer(0, (c) =>
      c.query(`CREATE ROLE plain LOGIN PASSWORD 'plain-pw';
               GRANT USAGE ON SCHEMA shardflake_reference TO plain;
               GRANT ALL ON shardflake_reference.plans TO plain`),
    );
    const url = new URL(servers[0]?.url as string);
    url.username = 'plain';
    url.password = 'plain-pw';
    const plain = await connect(url.toString());
    try {
      const attempt = async (sql: string, sqlState: string) => {
        await plain.query('BEGIN');
        await assert.rejects(
          plain.query(sql),
          (e: unknown) => (e as { code?: string }).code === sqlState,
          sql,
        );
        await plain.query('ROLLBACK');
      };
      await attempt("INSERT INTO shardflake_reference.plans VALUES (3, 'team')", 'SF020');
      await attempt('SELECT shardflake_reference._shardflake_begin_write()', '42501');
      await attempt(
        'INSERT INTO shardflake_reference._shardflake_writers VALUES (pg_current_xact_id())',
        '42501',
      );
      await attempt('ALTER TABLE shardflake_reference.plans DISABLE TRIGGER _shardflake_guard', '42501');
      await attempt('SET session_replication_role = replica', '42501');
      // Reading is what the role is for.
      assert.equal(
        (await plain.query('SELECT count(*)::int AS n FROM shardflake_reference.plans')).rows[0]?.n,
        2,
      );
    } finally {
      await plain.end();
    }
    assert.equal((await planRows(0)).length, 2);
  });

  it('cluster migrate applies reference migrations once on every server, and a migration failing on one server changes none', async () => {
    await migrateCluster(config); // the seed again would violate the primary key: nothing runs twice
    const priced = {
      ...config,
      referenceMigrations: [
        ...config.referenceMigrations,
        {
          version: 2,
          name: 'prices',
          statements: ['ALTER TABLE plans ADD COLUMN price int', 'UPDATE plans SET price = id * 10'],
        },
      ],
    };
    await migrateCluster(priced);
    await migrateCluster(priced);
    for (const i of [0, 1]) {
      assert.deepEqual(
        (await planRows(i)).map((r) => [r.id, r.price]),
        [
          [1, 10],
          [2, 20],
        ],
      );
    }
    const price = await router.withShard({ shard: 3 }, async (s) => {
      const r = await s.query('SELECT plans.price FROM photos p JOIN plans ON plans.id = p.user_id');
      return r.rows[0]?.price;
    });
    assert.equal(price, 20);

    // Version 3 creates a table that already exists on the second server only: it fails there, and the first
    // server, which had run it successfully, is rolled back too.
    await onServer(1, (c) => c.query('CREATE TABLE shardflake_reference.extras (id int)'));
    const broken = {
      ...priced,
      referenceMigrations: [
        ...priced.referenceMigrations,
        {
          version: 3,
          name: 'extras',
          statements: ['CREATE TABLE extras (id int PRIMARY KEY)', "UPDATE plans SET name = 'x'"],
        },
      ],
    };
    await assert.rejects(migrateCluster(broken), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'MIGRATION_FAILED'), String(e));
      assert.match(e.message, /server b\b.*already exists.*rolled back on every server/);
      return true;
    });
    for (const i of [0, 1]) {
      const version = await onServer(i, async (c) => {
        const r = await c.query('SELECT max(version) AS v FROM shardflake_reference._shardflake_migrations');
        return r.rows[0]?.v;
      });
      assert.equal(version, 2, `server ${i}`);
      assert.deepEqual(
        (await planRows(i)).map((r) => r.name),
        ['free', 'pro'],
      );
    }
    assert.equal(
      await onServer(
        0,
        async (c) => (await c.query("SELECT to_regclass('shardflake_reference.extras') AS t")).rows[0]?.t,
      ),
      null,
    );
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigint, pgTable, text } from 'drizzle-orm/pg-core';
import { type Generated, Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import {
  createRouter,
  isShardflakeError,
  type Router,
  type ShardflakeId,
  type ShardSession,
  sessionPool,
} from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * One server, 8 shards: every kind of write keeps a lookup's entries (raw SQL, Kysely, Drizzle, the router's own
 * calls; insert, update of the column, delete; rollback changes nothing), a write outside a session cannot commit,
 * and of two sessions claiming one value exactly one commits — with the interleaving held open by an advisory lock
 * in a trigger on the entry table, so the second claimer is seen waiting on the first one's transaction.
 */
const servers = await useServers(1);
const USERS = 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)';
const config = testConfig(servers, {
  logicalShards: 8,
  tables: { users: USERS },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
});
let router: Router;
let admin: pg.Client;

before(async () => {
  await initCluster(config);
  router = await createRouter(config);
  admin = await connect(defined(servers[0]).url);
});
after(async () => {
  await router?.close();
  await admin?.end();
});

const entryShard = (value: string) => shardForKey(value, 8);

/** Every entry of the lookup, over all shards, as `value→id`. */
async function entries(): Promise<string[]> {
  const parts = Array.from(
    { length: 8 },
    (_, s) => `SELECT value, id FROM "${shardSchema(config, s)}"._shardflake_lookup_user_email`,
  );
  const { rows } = await admin.query(`${parts.join(' UNION ALL ')} ORDER BY 1`);
  return rows.map((r: { value: string; id: string }) => `${r.value}→${r.id}`);
}

interface DB {
  users: { id: Generated<bigint>; name: string; email: string | null };
}
const users = pgTable('users', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`next_id()`),
  name: text('name').notNull(),
  email: text('email'),
});

describe('lookup entries follow every write', () => {
  it('router.insert/update/delete keep the entry in the value’s shard, and lookup finds the row', async () => {
    const id = await router.insert('users', { name: 'ann', email: 'ann@example.com' }, { key: 1 });
    assert.deepEqual(await entries(), [`ann@example.com→${id}`]);
    assert.deepEqual(await router.lookup('user_email', 'ann@example.com'), {
      id,
      shard: router.shardOfId(id),
    });
    const { rows } = await admin.query(
      `SELECT id FROM "${shardSchema(config, entryShard('ann@example.com'))}"._shardflake_lookup_user_email`,
    );
    assert.equal(rows.length, 1, 'the entry lives in the shard of the value’s hash');
    await router.update('users', id, { email: 'ann@example.org' });
    assert.deepEqual(await entries(), [`ann@example.org→${id}`]);
    assert.equal(await router.lookup('user_email', 'ann@example.com'), null);
    await router.update('users', id, { name: 'Ann' });
    assert.deepEqual(await entries(), [`ann@example.org→${id}`], 'a write that leaves the column alone');
    await router.delete('users', id);
    assert.deepEqual(await entries(), []);
    assert.equal(await router.lookup('user_email', 'ann@example.org'), null);
  });

  it('raw SQL, Kysely and Drizzle in sessions; several changes of one row in one transaction net out', async () => {
    const kysely = (session: ShardSession) =>
      new Kysely<DB>({ dialect: new PostgresDialect({ pool: sessionPool(session) }) });
    const ids = await router.withShard({ key: 2 }, async (session) => {
      const raw = await session.query('INSERT INTO users (name, email) VALUES ($1, $2) RETURNING id', [
        'raw',
        'raw@x',
      ]);
      const k = await kysely(session)
        .insertInto('users')
        .values({ name: 'kysely', email: 'k@x' })
        .returning('id')
        .executeTakeFirstOrThrow();
      const [d] = await drizzle(session.client)
        .insert(users)
        .values({ name: 'drizzle', email: 'd1@x' })
        .returning({ id: users.id });
      // Drizzle's own transaction nests as a savepoint; its updates are captured like any other.
      await drizzle(session.client).transaction(async (tx) => {
        await tx.update(users).set({ email: 'd2@x' }).where(sql`id = ${d?.id}`);
        await tx.update(users).set({ email: 'd3@x' }).where(sql`id = ${d?.id}`);
      });
      return [raw.rows[0]?.id as ShardflakeId, k.id, d?.id as ShardflakeId];
    });
    assert.deepEqual(await entries(), [`d3@x→${ids[2]}`, `k@x→${ids[1]}`, `raw@x→${ids[0]}`]);
    const many = await router.lookupMany('user_email', ['k@x', 'nobody@x', 'raw@x', 'd1@x', 'd3@x']);
    assert.deepEqual(
      many.map((h) => h?.id ?? null),
      [ids[1], null, ids[0], null, ids[2]],
    );
    await router.withShard({ key: 2 }, (s) =>
      s.query("DELETE FROM users WHERE name IN ('raw', 'kysely', 'drizzle')"),
    );
    assert.deepEqual(await entries(), []);
  });

  it('a rolled-back session, or a rolled-back savepoint, changes no entry', async () => {
    await assert.rejects(
      router.withShard({ key: 3 }, async (session) => {
        await session.query("INSERT INTO users (name, email) VALUES ('gone', 'gone@x')");
        throw new Error('changed my mind');
      }),
      /changed my mind/,
    );
    const id = await router.withShard({ key: 3 }, async (session) => {
      await drizzle(session.client)
        .transaction(async (tx) => {
          await tx.insert(users).values({ name: 'sp', email: 'savepoint@x' });
          tx.rollback();
        })
        .catch(() => {});
      const { rows } = await session.query(
        "INSERT INTO users (name, email) VALUES ('kept', 'kept@x') RETURNING id",
      );
      return rows[0]?.id as ShardflakeId;
    });
    assert.deepEqual(await entries(), [`kept@x→${id}`]);
    await router.delete('users', id);
  });

  it('insertMany keeps the entries of every row; a shard whose rows claim a taken value lands none of them', async () => {
    const ids = await router.insertMany(
      'users',
      Array.from({ length: 20 }, (_, i) => ({ name: `m${i}`, email: `m${i}@x` })),
      { key: (_row, i) => i },
    );
    const many = await router.lookupMany(
      'user_email',
      ids.map((_, i) => `m${i}@x`),
    );
    assert.deepEqual(
      many.map((h) => h?.id),
      ids,
    );
    await assert.rejects(
      router.insertMany(
        'users',
        [
          { name: 'new', email: 'new@x' },
          { name: 'again', email: 'm3@x' },
        ],
        { shard: 5 },
      ),
      (e: unknown) => isShardflakeError(e, 'UNIQUE_VIOLATION') && /2 rows did not land/.test(e.message),
    );
    assert.equal(await router.lookup('user_email', 'new@x'), null);
    for (const id of ids) await router.delete('users', id);
    assert.deepEqual(await entries(), []);
  });

  it('a write outside a shardflake session cannot commit (SF010), nor can a TRUNCATE', async () => {
    const schema = shardSchema(config, 0);
    await assert.rejects(
      admin.query(`INSERT INTO "${schema}".users (name, email) VALUES ('psql', 'psql@x')`),
      (e: { code?: string }) => e.code === 'SF010',
    );
    // TRUNCATE of a table that has rows would leave their entries behind (an empty one may be truncated).
    const id = await router.insert('users', { name: 'row', email: 'row@x' }, { shard: 0 });
    await assert.rejects(
      admin.query(`TRUNCATE "${schema}".users`),
      (e: { code?: string }) => e.code === 'SF010',
    );
    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".users`);
    assert.equal(rows[0].n, 1);
    await router.delete('users', id);
    await admin.query(`TRUNCATE "${schema}".users`);
    assert.deepEqual(await entries(), []);
  });

  it('a second owner of a unique value gets UNIQUE_VIOLATION naming the lookup but not the value', async () => {
    const id = await router.insert('users', { name: 'first', email: 'taken@x' }, { key: 4 });
    const error = await router.insert('users', { name: 'second', email: 'taken@x' }, { key: 5 }).then(
      () => assert.fail('the second owner committed'),
      (e: unknown) => e,
    );
    assert.ok(isShardflakeError(error, 'UNIQUE_VIOLATION'));
    assert.match(error.message, /user_email/);
    assert.doesNotMatch(`${error.message} ${error.detail ?? ''} ${String(error.cause ?? '')}`, /taken@x/);
    // The failed claimer's row did not commit either.
    const { rows } = await admin.query(
      Array.from({ length: 8 }, (_, s) => `SELECT name FROM "${shardSchema(config, s)}".users`).join(
        ' UNION ALL ',
      ),
    );
    assert.deepEqual(
      rows.map((r: { name: string }) => r.name),
      ['first'],
    );
    // Moving the value between rows in one transaction is allowed (remove first, then add).
    const other = await router.insert('users', { name: 'other', email: null }, { key: 4 });
    await router.withShard({ key: 4 }, async (s) => {
      await s.query('UPDATE users SET email = NULL WHERE id = $1', [id]);
      await s.query("UPDATE users SET email = 'taken@x' WHERE id = $1", [other]);
    });
    assert.deepEqual(await router.lookup('user_email', 'taken@x'), {
      id: other,
      shard: router.shardOfId(other),
    });
    await router.delete('users', id);
    await router.delete('users', other);
  });

  it('of two concurrent claimers, the second waits for the first one’s transaction and exactly one commits', async () => {
    // Held point: after the first claimer's entry insert, before its COMMIT (a trigger waits on advisory lock 4242).
    for (const firstCommits of [true, false]) {
      const value = firstCommits ? 'race@x' : 'race-rollback@x';
      const schema = shardSchema(config, entryShard(value));
      await admin.query(`CREATE OR REPLACE FUNCTION "${schema}".hold() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.value = '${value}' AND current_setting('application_name') <> 'second' THEN
            PERFORM pg_advisory_xact_lock(4242);
            IF NEW.value = 'race-rollback@x' THEN RAISE EXCEPTION 'first claimer fails after its entry'; END IF;
          END IF;
          RETURN NULL;
        END $$`);
      await admin.query(
        `CREATE OR REPLACE TRIGGER hold AFTER INSERT ON "${schema}"._shardflake_lookup_user_email FOR EACH ROW EXECUTE FUNCTION "${schema}".hold()`,
      );
      await admin.query('SELECT pg_advisory_lock(4242)');
      const first = router.insert('users', { name: 'first', email: value }, { key: 6 }).then(
        (id) => ({ id }),
        (error: unknown) => ({ error }),
      );
      await until(async () => (await waiting("locktype = 'advisory'")) === 1);
      const second = router
        .withShard({ key: 7 }, async (s) => {
          await s.query("SET LOCAL application_name = 'second'");
          const { rows } = await s.query('INSERT INTO users (name, email) VALUES ($1, $2) RETURNING id', [
            'second',
            value,
          ]);
          return rows[0]?.id as ShardflakeId;
        })
        .then(
          (id) => ({ id }),
          (error: unknown) => ({ error }),
        );
      // The second claimer's entry insert waits on the first claimer's transaction id: the unique index wait.
      await until(async () => (await waiting("locktype = 'transactionid'")) === 1);
      await admin.query('SELECT pg_advisory_unlock(4242)');
      const [a, b] = await Promise.all([first, second]);
      if (firstCommits) {
        assert.ok('id' in a, 'the first claimer commits');
        assert.ok('error' in b && isShardflakeError(b.error, 'UNIQUE_VIOLATION'), 'the second is refused');
        assert.deepEqual(await router.lookup('user_email', value), {
          id: a.id,
          shard: router.shardOfId(a.id),
        });
      } else {
        assert.ok('error' in a, 'the first claimer failed after writing its entry');
        assert.ok('id' in b, 'so the second one commits');
        assert.deepEqual(await router.lookup('user_email', value), {
          id: b.id,
          shard: router.shardOfId(b.id),
        });
      }
      assert.deepEqual(
        (await entries()).filter((e) => e.startsWith(`${value}→`)).length,
        1,
        'one entry for the value',
      );
    }
  });
});

async function waiting(where: string): Promise<number> {
  const { rows } = await admin.query(
    `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND ${where}`,
  );
  return rows[0].n;
}

async function until(check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

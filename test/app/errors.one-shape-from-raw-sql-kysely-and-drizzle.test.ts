import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigint, pgTable, text } from 'drizzle-orm/pg-core';
import { type Generated, Kysely, PostgresDialect } from 'kysely';
import {
  createRouter,
  isShardflakeError,
  type Router,
  type ShardflakeId,
  type ShardSession,
  sessionPool,
  sqlStateOf,
} from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

/**
 * One error story: a database error raised inside a shard session reaches the caller in the same shape whichever
 * client raised it — ShardflakeError DATABASE_ERROR, SQLSTATE in `sqlState`, the client's own error as `cause` — and
 * `sqlStateOf(error)` finds the SQLSTATE in that shape and in every client's raw error as well.
 */
const servers = await useServers(1);
const config = testConfig(servers, {
  logicalShards: 4,
  tables: { tags: 'CREATE TABLE tags (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL UNIQUE)' },
});
let router: Router;

interface DB {
  tags: { id: Generated<ShardflakeId>; name: string };
}
const tags = pgTable('tags', {
  id: bigint('id', { mode: 'bigint' }).$type<ShardflakeId>().primaryKey().default(drizzleSql`next_id()`),
  name: text('name').notNull(),
});

/** Three ways to insert the same duplicate name: each must fail with 23505 (unique_violation). */
const clients: Record<string, (session: ShardSession) => Promise<unknown>> = {
  'session.query': (s) => s.query('INSERT INTO tags (name) VALUES ($1)', ['dup']),
  'pg through session.client': (s) => s.client.query('INSERT INTO tags (name) VALUES ($1)', ['dup']),
  Kysely: (s) =>
    new Kysely<DB>({ dialect: new PostgresDialect({ pool: sessionPool(s) }) })
      .insertInto('tags')
      .values({ name: 'dup' })
      .execute(),
  Drizzle: (s) => drizzle(s.client).insert(tags).values({ name: 'dup' }),
};

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 2 });
  await router.withShard({ shard: 1 }, (s) => s.query("INSERT INTO tags (name) VALUES ('dup')"));
});
after(async () => {
  await router?.close();
});

describe('errors raised inside a shard session', () => {
  for (const [name, insert] of Object.entries(clients)) {
    it(`${name}: DATABASE_ERROR with sqlState 23505, the client's error as cause, and nothing written`, async () => {
      let raw: unknown;
      const error = await router
        .withShard({ shard: 1 }, async (s) => {
          await s.query("INSERT INTO tags (name) VALUES ('kept only on commit')");
          // What the client throws inside the callback, before the session reshapes it.
          raw = await insert(s).then(
            () => undefined,
            (e: unknown) => e,
          );
          throw raw;
        })
        .then(
          () => assert.fail('the duplicate was accepted'),
          (e: unknown) => e,
        );
      assert.ok(isShardflakeError(error, 'DATABASE_ERROR'), `${name}: ${String(error)}`);
      assert.equal(error.sqlState, '23505');
      assert.equal(sqlStateOf(error), '23505');
      // session.query throws this shape itself; every other client's error is kept whole as the cause.
      if (name === 'session.query') assert.equal(error, raw);
      else assert.equal(error.cause, raw, 'cause is exactly what the client threw');
      assert.match(error.message, /duplicate key value violates unique constraint/);
      assert.match(error.detail ?? '', /Key \(name\)=\(dup\) already exists/);
      // sqlStateOf reads every client's raw error too (Drizzle wraps pg's error in its own, with `cause`).
      assert.equal(sqlStateOf(raw), '23505', `sqlStateOf of ${name}'s raw error`);
      const rows = await router.withShard({ shard: 1 }, (s) =>
        s.query<{ n: number }>("SELECT count(*)::int AS n FROM tags WHERE name = 'kept only on commit'"),
      );
      assert.equal(rows.rows[0]?.n, 0, 'the session rolled back');
    });
  }

  it("the application's own errors come back as they are, even with a database error as their cause", async () => {
    class NameTaken extends Error {}
    const mine = await router
      .withShard({ shard: 1 }, async (s) => {
        try {
          await s.client.query("INSERT INTO tags (name) VALUES ('dup')");
        } catch (cause) {
          throw new NameTaken('that name is taken', { cause });
        }
      })
      .catch((e: unknown) => e);
    assert.ok(mine instanceof NameTaken);
    assert.equal(sqlStateOf(mine), '23505', 'sqlStateOf follows the cause chain');
    const plain = new Error('no database here');
    assert.equal(
      await router.withShard({ shard: 1 }, () => Promise.reject(plain)).catch((e: unknown) => e),
      plain,
    );
    assert.equal(sqlStateOf(plain), undefined);
  });

  it('sqlStateOf reads a plain pg client error and the router errors outside sessions', async () => {
    const c = await connect(servers[0]?.url as string);
    try {
      const raw = await c.query('SELECT * FROM no_such_table').catch((e: unknown) => e);
      assert.equal(sqlStateOf(raw), '42P01');
    } finally {
      await c.end();
    }
    const viaRouter = await router
      .queryByShard({ sql: (t) => `SELECT * FROM ${t('tags')} WHERE nope = 1` })
      .catch((e: unknown) => e);
    assert.ok(isShardflakeError(viaRouter, 'DATABASE_ERROR'));
    assert.equal(sqlStateOf(viaRouter), '42703');
    assert.equal(sqlStateOf(undefined), undefined);
    assert.equal(sqlStateOf({ code: 'ENOENT' }), undefined);
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eq, sql } from 'drizzle-orm';
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
} from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);
const config = testConfig(servers, { logicalShards: 4 });
let router: Router;

interface DB {
  photos: { id: Generated<ShardflakeId>; user_id: bigint; caption: string | null };
}
const kyselyFor = (session: ShardSession) =>
  new Kysely<DB>({ dialect: new PostgresDialect({ pool: sessionPool(session) }) });

const photos = pgTable('photos', {
  // The database fills id with the shard's next_id(); the default here only tells Drizzle it may be left out.
  id: bigint('id', { mode: 'bigint' }).$type<ShardflakeId>().primaryKey().default(sql`next_id()`),
  userId: bigint('user_id', { mode: 'bigint' }).notNull(),
  caption: text('caption'),
});

/** The captions in each shard, read straight from the servers. */
async function captionsByShard(): Promise<string[][]> {
  const result: string[][] = [];
  for (let shard = 0; shard < 4; shard++) {
    const { server } = router.placement(shard);
    const c = await connect(servers.find((s) => s.name === server)?.url as string);
    const { rows } = await c.query(`SELECT caption FROM "${shardSchema(config, shard)}".photos ORDER BY id`);
    result.push(rows.map((r: { caption: string }) => r.caption));
    await c.end();
  }
  return result;
}

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 2 });
});
after(async () => {
  await router?.close();
});

describe('query builders inside shard sessions', () => {
  it('Kysely: unqualified tables land in the session shard; its transaction() nests; destroy() ends nothing', async () => {
    for (const user of [1n, 2n, 3n]) {
      const id = await router.withShard({ key: user }, async (session) => {
        const db = kyselyFor(session);
        const row = await db
          .insertInto('photos')
          .values({ user_id: user, caption: `kysely ${user}` })
          .returning('id')
          .executeTakeFirstOrThrow();
        await db.transaction().execute(async (tx) => {
          await tx.insertInto('photos').values({ user_id: user, caption: 'nested' }).execute();
        });
        await db
          .transaction()
          .execute(async (tx) => {
            await tx.insertInto('photos').values({ user_id: user, caption: 'nested, rolled back' }).execute();
            throw new Error('undo the nested part');
          })
          .catch(() => {});
        const mine = await db.selectFrom('photos').select(['caption']).where('user_id', '=', user).execute();
        assert.deepEqual(
          mine.map((r) => r.caption),
          [`kysely ${user}`, 'nested'],
        );
        await db.destroy();
        return row.id;
      });
      assert.equal(typeof id, 'bigint');
      assert.equal(router.shardOfId(id), Number(user % 4n));
    }
    const byShard = await captionsByShard();
    assert.deepEqual(byShard[1], ['kysely 1', 'nested']);
    assert.deepEqual(byShard[2], ['kysely 2', 'nested']);
    assert.deepEqual(byShard[3], ['kysely 3', 'nested']);
    // destroy() did not end the router's pools.
    assert.equal(
      await router.withShard({ shard: 0 }, async (s) => (await s.query('SELECT 1 AS x')).rows[0]?.x),
      1,
    );
  });

  it('Kysely: an unknown column is a database error and the session rolls back', async () => {
    await assert.rejects(
      router.withShard({ key: 1n }, async (session) => {
        const db = kyselyFor(session);
        await db.insertInto('photos').values({ user_id: 1n, caption: 'kept only if all succeed' }).execute();
        await db
          .insertInto('photos')
          .values({ user_id: 1n, nope: 'x' } as never)
          .execute();
      }),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '42703',
    );
    assert.deepEqual((await captionsByShard())[1], ['kysely 1', 'nested']);
  });

  it('Drizzle: drizzle(session.client) queries land in the session shard; its transaction() nests as a savepoint', async () => {
    const inserted = await router.withShard({ key: 6n }, async (session) => {
      const db = drizzle(session.client);
      const [row] = await db
        .insert(photos)
        .values({ userId: 6n, caption: 'drizzle' })
        .returning({ id: photos.id });
      await db.transaction(async (tx) => {
        await tx.insert(photos).values({ userId: 6n, caption: 'drizzle nested' });
      });
      await db
        .transaction(async (tx) => {
          await tx.insert(photos).values({ userId: 6n, caption: 'drizzle rolled back' });
          tx.rollback();
        })
        .catch(() => {});
      const rows = await db.select({ caption: photos.caption }).from(photos).where(eq(photos.userId, 6n));
      const path = await db.execute(sql`SELECT current_setting('search_path') AS p`);
      assert.equal(path.rows[0]?.p, `${shardSchema(config, 2)}, shardflake_reference`);
      return { id: row?.id, captions: rows.map((r) => r.caption) };
    });
    assert.deepEqual(inserted.captions, ['drizzle', 'drizzle nested']);
    assert.equal(router.shardOfId(inserted.id as ShardflakeId), 2);
    assert.deepEqual((await captionsByShard())[2], ['kysely 2', 'nested', 'drizzle', 'drizzle nested']);
  });

  it('a Kysely instance kept after the session ended is refused with SESSION_CLOSED', async () => {
    const db = await router.withShard({ shard: 0 }, (session) => kyselyFor(session));
    await assert.rejects(db.selectFrom('photos').selectAll().execute(), (e: unknown) =>
      isShardflakeError(e, 'SESSION_CLOSED'),
    );
  });
});

import { eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { bigint, pgTable, text } from 'drizzle-orm/pg-core';
import { Kysely, PostgresDialect } from 'kysely';
import { startEmbeddedServers } from '@shardflake/embedded';
import { createRouter, initCluster, sessionPool, validateConfig } from 'shardflake';

const servers = await startEmbeddedServers(2);
try {
  const config = validateConfig(
    {
      servers: { a: servers[0].url, b: servers[1].url },
      catalog: 'a',
      logicalShards: 16,
      tables: {
        users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, photos integer NOT NULL DEFAULT 0)',
        photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
      },
    },
    'example',
  );
  await initCluster(config);
  const router = await createRouter(config);

  // A shard session: your own SQL, one transaction in one shard, unqualified table names.
  const alice = await router.withShard({ key: 'alice' }, async (session) => {
    const { rows } = await session.query(`INSERT INTO users (name) VALUES ('alice') RETURNING id`);
    return rows[0].id; // a bigint whose shard bits say where alice lives
  });
  await router.withShard({ id: alice }, async (session) => {
    await session.query('INSERT INTO photos (user_id, caption) VALUES ($1, $2)', [alice, 'sunset']);
    await session.query('UPDATE users SET photos = photos + 1 WHERE id = $1', [alice]);
  });
  console.log('alice on shard', router.shardOfId(alice), 'server', router.placement(router.shardOfId(alice)).server);

  // Kysely: a PostgresDialect over the session (sessionPool), its ordinary API.
  const user = await router.withShard({ id: alice }, (session) => {
    const db = new Kysely({ dialect: new PostgresDialect({ pool: sessionPool(session) }) });
    return db.selectFrom('users').select(['name', 'photos']).where('id', '=', alice).executeTakeFirstOrThrow();
  });
  console.log('kysely', user.name, user.photos);

  // Drizzle: drizzle(session.client).
  const photos = pgTable('photos', {
    id: bigint('id', { mode: 'bigint' }).primaryKey(),
    userId: bigint('user_id', { mode: 'bigint' }).notNull(),
    caption: text('caption'),
  });
  const mine = await router.withShard({ id: alice }, (session) =>
    drizzle(session.client).select({ caption: photos.caption }).from(photos).where(eq(photos.userId, alice)),
  );
  console.log('drizzle', mine.map((p) => p.caption).join(','));

  // Bulk: split by shard, one INSERT per shard, ids in input order.
  const rows = [1n, 2n, 17n].map((u) => ({ user_id: u, caption: `photo of ${u}` }));
  const ids = await router.insertMany('photos', rows, { key: (row) => row.user_id });
  console.log('insertMany shards', ids.map((id) => router.shardOfId(id)).join(','));

  // Across shards: merged newest first (keyset pages), or per shard.
  const page = await router.query({
    sql: (table) => `SELECT id, caption FROM ${table('photos')} WHERE user_id = ANY($1)`,
    values: [[1n, 17n]],
    limit: 10,
  });
  console.log('query', page.rows.map((r) => r.caption).join(' | '));
  const perShard = await router.queryByShard({ shards: [1, 2], sql: (table) => `SELECT count(*)::int AS n FROM ${table('photos')}` });
  console.log('per shard', [...perShard].map(([shard, [row]]) => `${shard}:${row.n}`).join(' '));
  await router.close();
} finally {
  await Promise.all(servers.map((s) => s.stop()));
}

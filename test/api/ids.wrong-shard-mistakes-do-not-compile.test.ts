import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Generated, Kysely } from 'kysely';
import {
  asId,
  asIds,
  type FeedPage,
  isShardflakeError,
  type Router,
  type ShardflakeId,
  type ShardKey,
  type ShardTarget,
} from 'shardflake';
import { asId as asIdFromIds, type ShardflakeId as IdFromIds } from 'shardflake/ids';

/**
 * The wrong-shard mistakes of issue 22, as compile errors. This file is part of the build (`tsc` compiles `test/`),
 * and every `@ts-expect-error` below must meet an error: if a change to the types lets one of these mistakes
 * compile again, the line's directive is unused and the build fails ("Unused '@ts-expect-error' directive").
 *
 * `mistakes` is never called: it only has to type-check. The `it` blocks check what the types promise at run time.
 */
export async function mistakes(
  router: Router,
  userKey: bigint,
  id: ShardflakeId,
  raw: bigint,
): Promise<void> {
  // An id routes by the shard in its bits; passing it as a shard key would route it by modulo.
  // @ts-expect-error Type 'ShardflakeId' is not assignable to type 'ShardKey'
  await router.withShard({ key: id }, () => {});
  // @ts-expect-error an id is not an insert key
  await router.insert('photos', { caption: 'x' }, { key: id });
  // @ts-expect-error an id is not a key for shardFor
  router.shardFor(id);
  // @ts-expect-error insertMany's key function must not return an id
  await router.insertMany('likes', [{ photo_id: id }], { key: (row) => row.photo_id });
  // @ts-expect-error an id is not a ShardKey anywhere
  const key: ShardKey = id;

  // A key (a plain bigint) where an id is expected.
  // @ts-expect-error Type 'bigint' is not assignable to type 'ShardflakeId'
  await router.withShard({ id: userKey }, () => {});
  // @ts-expect-error get takes an id
  await router.get('photos', raw);
  // @ts-expect-error update takes an id
  await router.update('photos', raw, { caption: 'y' });
  // @ts-expect-error delete takes an id
  await router.delete('photos', raw);
  // @ts-expect-error shardOfId takes an id
  router.shardOfId(raw);
  // @ts-expect-error a page boundary is an id
  await router.feed('photos', { before: raw });
  // @ts-expect-error a target's id is a ShardflakeId
  const target: ShardTarget = { id: 5n };

  // A feed's keys say what they are: ids need keysAreIds: true, and keysAreIds: true needs ids.
  // @ts-expect-error ids without keysAreIds would be routed as keys (0 rows)
  await router.feed('photos', { column: 'user_id', keys: [id] });
  // @ts-expect-error keysAreIds with plain bigints: claim them with asId first
  await router.feed('photos', { column: 'user_id', keys: [userKey], keysAreIds: true });

  // The right forms compile.
  await router.withShard({ key: userKey }, () => {});
  await router.withShard({ id }, () => {});
  await router.withShard({ id: asId(raw) }, () => {});
  await router.feed('photos', { column: 'user_id', keys: [id], keysAreIds: true });
  await router.feed('photos', { column: 'user_id', keys: [userKey, 7, 'alice'] });
  const made: ShardflakeId = await router.insert('photos', { caption: 'x' }, { key: userKey });
  const many: ShardflakeId[] = await router.insertMany('photos', [{ user_id: 1n }], { shard: 3 });
  const plain: bigint = made; // an id is still a bigint wherever one is wanted
  const fromIds: IdFromIds = made; // one type for both entries
  void [key, target, many, plain, fromIds];
}

/** Typed reads: each read takes the row type, as pg's query<R> does, and returns it. */
interface Photo {
  id: ShardflakeId;
  user_id: ShardflakeId;
  caption: string | null;
}
export async function typedReads(router: Router, id: ShardflakeId): Promise<void> {
  const one = await router.get<Photo>('photos', id);
  if (one) router.shardOfId(one.user_id);
  const page: FeedPage<Photo> = await router.feed<Photo>('photos', { shards: [1] });
  if (page.rows[0]) await router.get('photos', page.rows[0].id);
  const merged = await router.query<Photo>({ sql: (t) => `SELECT * FROM ${t('photos')}` });
  const caption: string | null | undefined = merged.rows[0]?.caption;
  const perShard = await router.queryByShard<Photo>({ sql: (t) => `SELECT * FROM ${t('photos')}` });
  for (const [, rows] of perShard) for (const row of rows) router.shardOfId(row.id);
  const inSession = await router.withShard(
    { id },
    async (s) => (await s.query<Photo>('SELECT * FROM photos')).rows,
  );
  const first: Photo | undefined = inSession[0];
  // @ts-expect-error a typed row has only its columns
  void one?.nope;
  // @ts-expect-error an untyped row's columns are unknown, not any
  const untyped: string = (await router.get('photos', id))?.caption;
  void [caption, first, untyped];
}

/** Kysely: an id column typed `Generated<ShardflakeId>` hands out ids the router takes, and keys it refuses. */
interface DB {
  photos: { id: Generated<ShardflakeId>; user_id: bigint; caption: string | null };
}
export async function kyselyColumns(router: Router, db: Kysely<DB>): Promise<void> {
  const row = await db.selectFrom('photos').select(['id', 'user_id']).executeTakeFirstOrThrow();
  await router.get('photos', row.id);
  await router.withShard({ key: row.user_id }, () => {});
  // @ts-expect-error the user_id column holds keys here, not ids
  await router.withShard({ id: row.user_id }, () => {});
  // @ts-expect-error and an id column is not a key
  await router.withShard({ key: row.id }, () => {});
}

describe('ShardflakeId at run time', () => {
  it('is a plain bigint: asId returns the same value, compares with ===, and is the same in both entries', () => {
    const id = asId(123456789012345678n);
    assert.equal(typeof id, 'bigint');
    assert.equal(id, 123456789012345678n);
    assert.equal(asId('123456789012345678'), id);
    assert.equal(asIdFromIds(id), id);
    assert.deepEqual(asIds([1n, '2']), [1n, 2n]);
    assert.equal(JSON.stringify({ id: String(id) }), '{"id":"123456789012345678"}');
  });

  it('refuses what cannot be an id (negative, over 2^63 - 1, not digits, not a bigint) with INVALID_ID', () => {
    for (const bad of [-1n, 1n << 63n, '12a', '', '-5', '99999999999999999999', 5, null, 1.5, undefined]) {
      assert.throws(
        () => asId(bad as bigint),
        (e: unknown) => isShardflakeError(e, 'INVALID_ID') && !/\n/.test(e.message),
        String(bad),
      );
    }
    assert.equal(asId((1n << 63n) - 1n), (1n << 63n) - 1n);
    assert.equal(asId('0'), 0n);
  });
});

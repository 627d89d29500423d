import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Router, type ShardflakeId, type ShardSession, type ShardTarget, sessionPool } from 'shardflake';
import type { ShardDB } from './schema.js';

/**
 * An Instagram-like service on shard sessions: every request is one transaction in one shard, written with Kysely
 * on unqualified table names. The router re-runs a request's callback when its shard moves under it, so each
 * callback only touches the database (no outside side effects) and is written to be safe to run again from the
 * start — it is, because an interrupted run was rolled back.
 */
export interface Photo {
  id: ShardflakeId;
  user_id: ShardflakeId;
  caption: string;
  like_count: number;
}

export class InstagramApp {
  constructor(private readonly router: Router) {}

  /** One request: fn with a Kysely bound to the target shard's session. */
  private inShard<T>(target: ShardTarget, fn: (db: Kysely<ShardDB>) => Promise<T>): Promise<T> {
    return this.router.withShard(target, (session: ShardSession) =>
      fn(new Kysely<ShardDB>({ dialect: new PostgresDialect({ pool: sessionPool(session) }) })),
    );
  }

  /** A new user on the shard of their name; the id carries that shard, so everything of theirs can follow it. */
  async createUser(name: string): Promise<ShardflakeId> {
    const row = await this.inShard({ key: name }, (db) =>
      db.insertInto('users').values({ name }).returning('id').executeTakeFirstOrThrow(),
    );
    return row.id;
  }

  /** Stored on the follower's shard: the list a feed reads. Following twice is one follow. */
  async follow(follower: ShardflakeId, followee: ShardflakeId): Promise<void> {
    await this.inShard({ id: follower }, (db) =>
      db
        .insertInto('follows')
        .values({ follower_id: follower, followee_id: followee })
        .onConflict((c) => c.doNothing())
        .execute(),
    );
  }

  /** The photo and the user's counter change together, in the user's shard. */
  async postPhoto(user: ShardflakeId, caption: string): Promise<ShardflakeId> {
    return this.inShard({ id: user }, async (db) => {
      const photo = await db
        .insertInto('photos')
        .values({ user_id: user, caption })
        .returning('id')
        .executeTakeFirstOrThrow();
      await db
        .updateTable('users')
        .set({ photo_count: sql`photo_count + 1` })
        .where('id', '=', user)
        .execute();
      return photo.id;
    });
  }

  /** A like lives with its photo; the photo's counter moves only when the like is new. */
  async like(user: ShardflakeId, photo: ShardflakeId): Promise<boolean> {
    return this.inShard({ id: photo }, async (db) => {
      const added = await db
        .insertInto('likes')
        .values({ photo_id: photo, user_id: user })
        .onConflict((c) => c.doNothing())
        .returning('photo_id')
        .executeTakeFirst();
      if (!added) return false;
      await db
        .updateTable('photos')
        .set({ like_count: sql`like_count + 1` })
        .where('id', '=', photo)
        .execute();
      return true;
    });
  }

  /** The newest photos of the people a user follows, across their shards, newest first; pass `next` for more. */
  async feed(
    user: ShardflakeId,
    limit = 20,
    before?: ShardflakeId,
  ): Promise<{ photos: Photo[]; next: ShardflakeId | null }> {
    const followees = await this.router.withShard(
      { id: user },
      async (session) => {
        const db = new Kysely<ShardDB>({ dialect: new PostgresDialect({ pool: sessionPool(session) }) });
        const rows = await db
          .selectFrom('follows')
          .select('followee_id')
          .where('follower_id', '=', user)
          .execute();
        return rows.map((r) => r.followee_id);
      },
      { readOnly: true },
    );
    if (followees.length === 0) return { photos: [], next: null };
    const page = await this.router.feed<Photo>('photos', {
      column: 'user_id',
      keys: followees,
      keysAreIds: true,
      limit,
      before,
    });
    return { photos: page.rows, next: page.next };
  }
}

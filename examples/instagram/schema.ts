import type { ColumnType, Generated } from 'kysely';
import type { ShardflakeId } from 'shardflake';

/**
 * The example's tables, created in every logical shard by `cluster init` (each shard's `next_id()` fills `id`).
 * Placement follows Instagram's: a user's row, the people they follow and their photos live on the user's shard
 * (the shard in the user id's bits); a photo's likes live with the photo.
 */
export const TABLES: Record<string, string[]> = {
  users: [
    `CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL UNIQUE,
       photo_count integer NOT NULL DEFAULT 0)`,
  ],
  follows: [
    `CREATE TABLE follows (follower_id bigint NOT NULL, followee_id bigint NOT NULL,
       PRIMARY KEY (follower_id, followee_id))`,
  ],
  photos: [
    `CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text NOT NULL,
       like_count integer NOT NULL DEFAULT 0)`,
    'CREATE INDEX photos_user ON photos (user_id, id)',
  ],
  likes: [
    `CREATE TABLE likes (photo_id bigint NOT NULL, user_id bigint NOT NULL, PRIMARY KEY (photo_id, user_id))`,
  ],
  // Sign-up and login (accounts.ts): on the user's shard, found by email through the lookup below.
  accounts: [
    `CREATE TABLE accounts (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, email text NOT NULL,
       password_hash text NOT NULL)`,
  ],
};

/** The config's `lookups` for the example: an email is unique across the cluster and finds its account. */
export const LOOKUPS = { account_email: { table: 'accounts', column: 'email', unique: true } };

/**
 * Kysely's view of one shard's tables (int8 arrives as bigint: shardflake's connections parse it so). Every column
 * that holds an id made by the cluster is a `ShardflakeId`, so what Kysely returns routes with `{ id }` without a
 * cast, and cannot be passed as a shard key by mistake.
 */
export interface ShardDB {
  users: { id: Generated<ShardflakeId>; name: string; photo_count: ColumnType<number, never, number> };
  follows: { follower_id: ShardflakeId; followee_id: ShardflakeId };
  photos: {
    id: Generated<ShardflakeId>;
    user_id: ShardflakeId;
    caption: string;
    like_count: ColumnType<number, never, number>;
  };
  likes: { photo_id: ShardflakeId; user_id: ShardflakeId };
  accounts: { id: Generated<ShardflakeId>; user_id: ShardflakeId; email: string; password_hash: string };
}

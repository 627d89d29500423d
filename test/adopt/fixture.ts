import type pg from 'pg';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';

/**
 * A small live database to adopt: users (the root; a unique email), photos beside their user, comments beside
 * their photo (two hops; a commenter's user_id that cannot hold inside a shard), follows (a key that holds its
 * placement column), and plans (a reference table). Ids are bigserial, as an application made them.
 */
export const SOURCE_SQL = `
CREATE TABLE plans (id integer PRIMARY KEY, name text NOT NULL UNIQUE);
CREATE TABLE users (
  id bigserial PRIMARY KEY,
  email text NOT NULL UNIQUE,
  name text NOT NULL,
  plan_id integer REFERENCES plans (id),
  bio text,
  created_at timestamptz NOT NULL DEFAULT now(),
  CHECK (length(email) > 3)
);
CREATE TABLE photos (
  id bigserial PRIMARY KEY,
  user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  caption text,
  likes integer NOT NULL DEFAULT 0,
  UNIQUE (user_id, caption)
);
CREATE INDEX photos_user_id ON photos (user_id);
CREATE TABLE comments (
  id bigserial PRIMARY KEY,
  photo_id bigint NOT NULL REFERENCES photos (id) ON DELETE CASCADE,
  author_id bigint REFERENCES users (id),
  body text NOT NULL
);
CREATE TABLE follows (
  follower_id bigint NOT NULL REFERENCES users (id),
  followee_id bigint NOT NULL REFERENCES users (id),
  since timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (follower_id, followee_id)
);
INSERT INTO plans VALUES (1, 'free'), (2, 'pro');
INSERT INTO users (email, name, plan_id, bio)
  SELECT 'user' || g || '@example.com', 'User ' || g, 1 + g % 2, CASE WHEN g % 10 = 0 THEN repeat('x', 5000) || g END
  FROM generate_series(1, 300) g;
INSERT INTO photos (user_id, caption, likes) SELECT 1 + g % 300, 'photo ' || g, g % 7 FROM generate_series(1, 900) g;
INSERT INTO comments (photo_id, author_id, body) SELECT 1 + g % 900, 1 + (g * 7) % 300, 'nice ' || g FROM generate_series(1, 600) g;
INSERT INTO follows (follower_id, followee_id) SELECT 1 + g % 300, 1 + (g * 13) % 300 FROM generate_series(1, 400) g
  ON CONFLICT DO NOTHING;
`;

export async function withClient<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = await connect(url);
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

/** Everything about the source a test compares before and after: its objects, slots, publications and rows. */
export async function sourceSnapshot(url: string): Promise<string> {
  return withClient(url, async (c) => {
    const parts: unknown[] = [];
    for (const sql of [
      `SELECT n.nspname, c.relname, c.relkind, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1, 2`,
      `SELECT tgrelid::regclass::text, tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2`,
      `SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' ORDER BY 1`,
      `SELECT nspname, obj_description(oid, 'pg_namespace') FROM pg_namespace ORDER BY 1`,
      'SELECT slot_name FROM pg_replication_slots ORDER BY 1',
      'SELECT pubname FROM pg_publication ORDER BY 1',
      'SELECT count(*), sum(hashtext(u::text)) FROM users u',
      'SELECT count(*), sum(hashtext(p::text)) FROM photos p',
      'SELECT count(*), sum(hashtext(c::text)) FROM comments c',
      'SELECT count(*), sum(hashtext(f::text)) FROM follows f',
      'SELECT count(*), sum(hashtext(p::text)) FROM plans p',
    ]) {
      parts.push((await c.query(sql)).rows);
    }
    return JSON.stringify(parts, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

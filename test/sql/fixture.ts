import type pg from 'pg';
import { createRouter, type Router } from 'shardflake';
import { initCluster } from '../../src/cluster/init.js';
import { connect } from '../../src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

/**
 * A small cluster (2 servers, 8 shards) holding users and their photos (each photo on its user's shard), and the
 * same rows in one plain schema `plain` on the first server: the reference answer for router.sql.
 */
export const TABLES = {
  users:
    'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), country text, age int, score numeric, active boolean, big bigint, ratio double precision)',
  photos:
    'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, likes int, caption text)',
};

export interface SqlFixture {
  router: Router;
  plain: pg.Client;
  config: ReturnType<typeof testConfig>;
}

const COUNTRIES = ['fr', 'de', 'jp', 'br', 'ca', null];
const SCORES = ['1.5', '2.25', '3', '-0.125', '10.10', null, '7'];

export async function sqlFixture(shards = 8, userCount = 120): Promise<SqlFixture> {
  const servers = await useServers(2);
  const config = testConfig(servers, { logicalShards: shards, tables: TABLES });
  await initCluster(config);
  const router = await createRouter(config);
  const users = Array.from({ length: userCount }, (_, i) => ({
    country: COUNTRIES[i % COUNTRIES.length] ?? null,
    age: i % 7 === 3 ? null : 18 + ((i * 13) % 50),
    score: SCORES[(i * 5) % SCORES.length] ?? null,
    active: i % 5 === 0 ? null : i % 3 === 0,
    big: i % 4 === 0 ? null : BigInt(i) * 1_000_000_000_000n,
    ratio: i % 6 === 0 ? null : (i % 9) / 4,
  }));
  const ids = await router.insertMany('users', users, { key: (_, i) => i });
  const photos: { user_id: bigint; likes: number | null; caption: string }[] = [];
  ids.forEach((id, i) => {
    for (let p = 0; p < i % 4; p++)
      photos.push({ user_id: id, likes: p === 2 ? null : (i * p) % 11, caption: `p${i}-${p}` });
  });
  const photoIds: bigint[] = [];
  for (const photo of photos)
    photoIds.push(await router.insert('photos', photo, { shard: router.shardOfId(photo.user_id) }));
  const plain = await connect(servers[0]?.url as string);
  await plain.query('CREATE SCHEMA plain');
  await plain.query('SET search_path TO plain');
  for (const text of Object.values(TABLES)) await plain.query(text.replace(' DEFAULT next_id()', ''));
  for (const [i, u] of users.entries())
    await plain.query('INSERT INTO users VALUES ($1, $2, $3, $4, $5, $6, $7)', [
      ids[i],
      u.country,
      u.age,
      u.score,
      u.active,
      u.big,
      u.ratio,
    ]);
  for (const [i, p] of photos.entries())
    await plain.query('INSERT INTO photos VALUES ($1, $2, $3, $4)', [
      photoIds[i],
      p.user_id,
      p.likes,
      p.caption,
    ]);
  return { router, plain, config };
}

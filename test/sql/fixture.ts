import assert from 'node:assert/strict';
import type pg from 'pg';
import { createRouter, type Router, type RouterOptions, type Row, type ShardflakeId } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

/**
 * A small cluster (2 servers, 8 shards) holding users and their photos (each photo on its user's shard), and the
 * same rows in one plain schema `plain` on the first server: the reference answer for router.sql. Also a reference
 * table (`countries`), in the cluster and in `plain`.
 */
export const TABLES = {
  users:
    'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), country text, age int, score numeric, active boolean, big bigint, ratio double precision)',
  photos:
    'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, likes int, caption text)',
};

/** A reference table (one copy on every server): countries, some users' countries missing, one with no user. */
export const REFERENCE = {
  countries: 'CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL, region text)',
};
const COUNTRY_ROWS = [
  ['fr', 'France', 'eu'],
  ['de', 'Germany', 'eu'],
  ['jp', 'Japan', 'asia'],
  ['br', 'Brazil', null],
  ['us', 'United States', 'americas'],
];

export interface SqlFixture {
  router: Router;
  /**
   * When asked for: a second router whose router.sql cuts each server's 4 shards into statements of 2 (pieces
   * forced small, so every query really is split), checked by sameAsOneTable beside the first. Close it too.
   */
  split?: Router;
  plain: pg.Client;
  config: ReturnType<typeof testConfig>;
  /** The cluster's config as a JSON file would hold it (for the CLI). */
  configFile: Record<string, unknown>;
}

const COUNTRIES = ['fr', 'de', 'jp', 'br', 'ca', null];
const SCORES = ['1.5', '2.25', '3', '-0.125', '10.10', null, '7'];

/** Router options that cut every server's shards of the fixture into several router.sql statements. */
export const SPLIT_OPTIONS: RouterOptions = { sqlShardsPerStatement: 3, sqlConnectionsPerServer: 2 };

export async function sqlFixture(
  shards = 8,
  userCount = 120,
  options: { split?: boolean } = {},
): Promise<SqlFixture> {
  const servers = await useServers(2);
  const config = testConfig(servers, { logicalShards: shards, tables: TABLES, referenceTables: REFERENCE });
  await initCluster(config);
  const router = await createRouter(config);
  const countries = 'INSERT INTO countries SELECT * FROM unnest($1::text[], $2::text[], $3::text[])';
  const countryValues = [0, 1, 2].map((i) => COUNTRY_ROWS.map((r) => r[i]));
  await router.withReference((s) => s.query(countries, countryValues));
  const users = Array.from({ length: userCount }, (_, i) => ({
    country: COUNTRIES[i % COUNTRIES.length] ?? null,
    age: i % 7 === 3 ? null : 18 + ((i * 13) % 50),
    score: SCORES[(i * 5) % SCORES.length] ?? null,
    active: i % 5 === 0 ? null : i % 3 === 0,
    big: i % 4 === 0 ? null : BigInt(i) * 1_000_000_000_000n,
    ratio: i % 6 === 0 ? null : (i % 9) / 4,
  }));
  const ids = await router.insertMany('users', users, { key: (_, i) => i });
  const photos: { user_id: ShardflakeId; likes: number | null; caption: string }[] = [];
  ids.forEach((id, i) => {
    for (let p = 0; p < i % 4; p++)
      photos.push({ user_id: id, likes: p === 2 ? null : (i * p) % 11, caption: `p${i}-${p}` });
  });
  // Each user's photos on the user's shard: one insertMany per shard.
  const byShard = new Map<number, typeof photos>();
  for (const photo of photos) {
    const shard = router.shardOfId(photo.user_id);
    byShard.set(shard, [...(byShard.get(shard) ?? []), photo]);
  }
  const placed: { id: bigint; photo: (typeof photos)[number] }[] = [];
  for (const [shard, list] of byShard) {
    const photoIds = await router.insertMany('photos', list, { shard });
    for (const [i, photo] of list.entries()) placed.push({ id: photoIds[i] as bigint, photo });
  }
  const plain = await connect(servers[0]?.url as string);
  await plain.query('CREATE SCHEMA plain');
  await plain.query('SET search_path TO plain');
  for (const text of Object.values(TABLES)) await plain.query(text.replace(' DEFAULT next_id()', ''));
  await plain.query(REFERENCE.countries);
  await plain.query(countries, countryValues);
  // The same rows, one statement per table (arrays unnested into rows).
  await plain.query(
    `INSERT INTO users SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::numeric[], $5::boolean[],
       $6::bigint[], $7::double precision[])`,
    [
      ids,
      users.map((u) => u.country),
      users.map((u) => u.age),
      users.map((u) => u.score),
      users.map((u) => u.active),
      users.map((u) => u.big),
      users.map((u) => u.ratio),
    ],
  );
  await plain.query(
    'INSERT INTO photos SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::text[])',
    [
      placed.map((p) => p.id),
      placed.map((p) => p.photo.user_id),
      placed.map((p) => p.photo.likes),
      placed.map((p) => p.photo.caption),
    ],
  );
  const configFile = {
    servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
    catalog: 'a',
    logicalShards: shards,
    epoch: '2024-01-01T00:00:00Z',
    tables: TABLES,
    referenceTables: REFERENCE,
  };
  const split = options.split ? await createRouter(config, SPLIT_OPTIONS) : undefined;
  return { router, plain, config, configFile, ...(split ? { split } : {}) };
}

const show = (rows: Row[]) =>
  rows.map((r) =>
    JSON.stringify(r, (_, v) => (typeof v === 'bigint' ? `${v}n` : v instanceof Date ? v.toISOString() : v)),
  );

/**
 * Asserts router.sql and router.sqlStream answer `text` as the plain tables do (as lists when `ordered`), through
 * the fixture's router and, when it has one, through its split router.
 */
export async function sameAsOneTable(
  f: SqlFixture,
  text: string,
  values: unknown[] = [],
  ordered = false,
): Promise<void> {
  const expected = show((await f.plain.query(text, values)).rows as Row[]);
  if (!ordered) expected.sort();
  for (const [router, label] of [
    [f.router, ''],
    [f.split, ' (split)'],
  ] as const) {
    if (!router) continue;
    const got = (
      await router
        .sql(text, values)
        .catch((e) => Promise.reject(new Error(`sql${label}: ${text}: ${e.message}`)))
    ).rows;
    const streamed: Row[] = [];
    try {
      for await (const row of router.sqlStream(text, values, { batchSize: 7 })) streamed.push(row);
    } catch (e) {
      throw new Error(`sqlStream${label}: ${text}: ${(e as Error).message}`);
    }
    const [g, s] = [show(got), show(streamed)];
    if (!ordered) for (const list of [g, s]) list.sort();
    assert.deepEqual(
      g,
      expected,
      `router.sql${label} differs from one table for: ${text} ${show([{ values }]).join()}`,
    );
    assert.deepEqual(s, expected, `router.sqlStream${label} differs from one table for: ${text}`);
  }
}

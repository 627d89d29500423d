import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, isShardflakeError, type Router, type ShardflakeId } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { readBuildProgress, readLookups } from '../../packages/shardflake/src/catalog/lookups.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * A lookup declared for a table that already has rows: `cluster migrate` builds it in batches, a killed (aborted)
 * build resumes from its recorded progress, writes made while it builds are kept, the lookup is readable only once
 * built, and a unique build over duplicate values stops and says which rows hold them (never the value).
 */
const servers = await useServers(1);
const USERS = 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)';
const plain = testConfig(servers, { logicalShards: 4, tables: { users: USERS } });
const withLookup = testConfig(servers, {
  logicalShards: 4,
  tables: { users: USERS },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
});
let before_: Router;
let router: Router;
let admin: pg.Client;

before(async () => {
  await initCluster(plain);
  before_ = await createRouter(plain);
  router = await createRouter(withLookup);
  admin = await connect(defined(servers[0]).url);
});
after(async () => {
  await before_?.close();
  await router?.close();
  await admin?.end();
});

async function entries(): Promise<Map<string, bigint>> {
  const parts = Array.from(
    { length: 4 },
    (_, s) => `SELECT value, id FROM "${shardSchema(withLookup, s)}"._shardflake_lookup_user_email`,
  );
  const { rows } = await admin.query(parts.join(' UNION ALL '));
  return new Map(rows.map((r: { value: string; id: string }) => [r.value, BigInt(r.id)]));
}

describe('building a lookup with cluster migrate', () => {
  it('builds in batches, resumes after a stop, keeps writes made during the build, then serves reads', async () => {
    const ids = await before_.insertMany(
      'users',
      Array.from({ length: 200 }, (_, i) => ({ name: `u${i}`, email: i % 10 === 9 ? null : `u${i}@x` })),
      { key: (_row, i) => i },
    );
    await assert.rejects(router.lookup('user_email', 'u0@x'), (e: unknown) =>
      isShardflakeError(e, 'LOOKUP_NOT_READY'),
    );
    // First run: stopped after the second batch (an abort, as a killed process would stop between batches).
    const stop = new AbortController();
    let batches = 0;
    const stopped = await migrateCluster(withLookup, {
      lookupBatchSize: 10,
      signal: stop.signal,
      onLookupProgress: () => {
        if (++batches === 2) stop.abort();
      },
    }).then(
      () => 'finished',
      () => 'stopped',
    );
    assert.equal(stopped, 'stopped');
    const catalog = await connect(defined(servers[0]).url);
    assert.equal((await readLookups(catalog)).get('user_email')?.phase, 'backfill');
    const progress = await readBuildProgress(catalog, 'user_email');
    assert.ok(progress.size > 0, 'progress was recorded');
    await catalog.end();
    await assert.rejects(router.lookup('user_email', 'u0@x'), (e: unknown) =>
      isShardflakeError(e, 'LOOKUP_NOT_READY'),
    );

    // Writes while the lookup is half built, through a router that does not even know the lookup: captured.
    const late = await before_.withShard({ key: 1 }, async (s) => {
      const { rows } = await s.query(
        "INSERT INTO users (name, email) VALUES ('late', 'late@x') RETURNING id",
      );
      await s.query("UPDATE users SET email = 'moved@x' WHERE id = $1", [ids[1]]);
      await s.query('DELETE FROM users WHERE id = $1', [ids[5]]);
      return rows[0]?.id as ShardflakeId;
    });

    // A write racing the rerun's batches (started from its first progress report): whichever of the batch's
    // FOR SHARE read and the update comes first, the entry ends up holding the row's committed value.
    let during: Promise<void> | undefined;
    const result = await migrateCluster(withLookup, {
      lookupBatchSize: 10,
      onLookupProgress: () => {
        during ??= before_
          .withShard({ id: defined(ids[21]) }, async (s) => {
            await s.query("UPDATE users SET email = 'during@x' WHERE id = $1", [ids[21]]);
          })
          .then(() => {});
      },
    });
    await during;
    assert.equal(result.lookups.length, 1);
    assert.equal(result.lookups[0]?.alreadyBuilt, false);
    const got = await entries();
    // Expected: every row's current value, once.
    const { rows } = await admin.query(
      Array.from(
        { length: 4 },
        (_, s) => `SELECT id, email FROM "${shardSchema(withLookup, s)}".users WHERE email IS NOT NULL`,
      ).join(' UNION ALL '),
    );
    const want = new Map(rows.map((r: { id: string; email: string }) => [r.email, BigInt(r.id)]));
    assert.deepEqual(got, want);
    assert.equal(got.get('late@x'), late);
    assert.equal(got.get('moved@x'), ids[1]);
    assert.equal(got.has('u1@x'), false);
    assert.equal(got.has('u5@x'), false);
    assert.equal(got.get('during@x'), ids[21]);
    assert.equal(got.size, 180, '200 rows, 20 of them NULL (no entry), one added and one deleted');
    assert.deepEqual(await router.lookup('user_email', 'u2@x'), {
      id: ids[2],
      shard: router.shardOfId(defined(ids[2])),
    });
    // A second run finds it built.
    const again = await migrateCluster(withLookup);
    assert.equal(again.lookups[0]?.alreadyBuilt, true);
  });

  it('a unique build over duplicate values stops and lists the rows that hold them', async () => {
    const config = testConfig(servers, {
      logicalShards: 4,
      tables: { users: USERS },
      lookups: {
        user_email: { table: 'users', column: 'email', unique: true },
        user_name: { table: 'users', column: 'name', unique: true },
      },
    });
    // u0…u199, late: names are unique so far; two more rows repeat names in other shards.
    const a = await before_.withShard({ key: 2 }, async (s) => {
      const { rows } = await s.query("INSERT INTO users (name) VALUES ('u7') RETURNING id");
      return rows[0]?.id as ShardflakeId;
    });
    const b = await before_.withShard({ key: 3 }, async (s) => {
      const { rows } = await s.query("INSERT INTO users (name) VALUES ('u8') RETURNING id");
      return rows[0]?.id as ShardflakeId;
    });
    const error = await migrateCluster(config, { lookupBatchSize: 50 }).then(
      () => assert.fail('the build of a unique lookup over duplicates finished'),
      (e: unknown) => e,
    );
    assert.ok(isShardflakeError(error, 'MIGRATION_FAILED'), String(error));
    assert.match(error.message, /2 pairs of rows hold the same value/);
    assert.match(error.message, new RegExp(`row ${a}`));
    assert.match(error.message, new RegExp(`row ${b}`));
    assert.doesNotMatch(`${error.message}\n${error.detail}`, /\bu7\b|\bu8\b/);
    const catalog = await connect(defined(servers[0]).url);
    assert.equal((await readLookups(catalog)).get('user_name')?.phase, 'backfill');
    await catalog.end();
    // Fixed through a session (which keeps the half-built lookup), the rerun finishes.
    const fixer = await createRouter(config);
    await fixer.withShard({ key: 2 }, (s) => s.query("UPDATE users SET name = 'u7 (2)' WHERE id = $1", [a]));
    await fixer.withShard({ key: 3 }, (s) => s.query('DELETE FROM users WHERE id = $1', [b]));
    const done = await migrateCluster(config, { lookupBatchSize: 50 });
    assert.deepEqual(
      done.lookups.map((l) => [l.lookup, l.alreadyBuilt]),
      [
        ['user_email', true],
        ['user_name', false],
      ],
    );
    assert.deepEqual(await fixer.lookup('user_name', 'u7 (2)'), { id: a, shard: fixer.shardOfId(a) });
    await fixer.close();
  });
});

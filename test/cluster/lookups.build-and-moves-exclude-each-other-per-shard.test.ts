import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, isShardflakeError, type Router, type ShardflakeId } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { type MigrateResult, migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { readLookups } from '../../packages/shardflake/src/catalog/lookups.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { SHARD_LOCK_CLASS } from '../../packages/shardflake/src/fence/shard-lock.js';
import { buildLookups } from '../../packages/shardflake/src/lookups/build.js';
import { verifyLookups } from '../../packages/shardflake/src/lookups/verify.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { closeAll, connectAll } from '../../packages/shardflake/src/topology/connections.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * The lookup build of `cluster migrate` (lookups/build.ts) and shard moves take the same per-shard lock, so a build
 * step and a move of one shard never run at once, whichever starts first: a move held at one of its steps makes
 * the build stop with SHARD_BUSY before it writes anything in that shard; a build held inside a backfill batch of a
 * shard makes the move of that shard refuse to start. Both builds then finish and verify clean. A batch's entry
 * shards are not locked: one that moves while a batch waits (the batch has read the map) is met through its old
 * copy's fence, and the batch runs again on the new map instead of failing the build.
 */
const servers = await useServers(2);
const USERS = 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)';
const base = { logicalShards: 4, tables: { users: USERS } };
const plain = testConfig(servers, base);
const byEmail = testConfig(servers, {
  ...base,
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
});
const byEmailAndName = testConfig(servers, {
  ...base,
  lookups: {
    user_email: { table: 'users', column: 'email', unique: true },
    user_name: { table: 'users', column: 'name' },
  },
});
let router: Router;
let catalog: pg.Client;
let ids: ShardflakeId[];

before(async () => {
  await initCluster(plain);
  router = await createRouter(plain);
  ids = await router.insertMany(
    'users',
    Array.from({ length: 80 }, (_, i) => ({ name: `n${i % 30}`, email: `e${i}@x` })),
    { key: (_row, i) => i },
  );
  catalog = await connect(defined(servers[0]).url);
});
after(async () => {
  await router?.close();
  await catalog?.end();
});

/** Whether some session holds the shard's lock (a move's or a build's). */
async function shardLocked(shard: number): Promise<boolean> {
  const { rows } = await catalog.query(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int::oid AND objid = $2 AND granted",
    [SHARD_LOCK_CLASS, shard],
  );
  return (rows[0] as { n: number }).n === 1;
}

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; !(await check()); i++) {
    assert.ok(i < 500, `never happened: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Starts `cluster migrate` with a row of `shard` locked FOR UPDATE by another session, and returns once the build
 * waits on that row inside a backfill batch of the shard, holding the shard's lock; `release` lets the row go.
 */
async function buildHeldInABatch(
  config: typeof plain,
  shard: number,
  lookup: string,
  lookupBatchSize: number,
): Promise<{ building: Promise<MigrateResult>; release: () => Promise<void> }> {
  const id = defined(ids.find((i) => router.shardOfId(i) === shard));
  const blocker = await connect(defined(servers.find((s) => s.name === router.placement(shard).server)).url);
  await blocker.query('BEGIN');
  await blocker.query(`SELECT 1 FROM "${shardSchema(plain, shard)}".users WHERE id = $1 FOR UPDATE`, [id]);
  const building = migrateCluster(config, { lookupBatchSize });
  building.catch(() => {});
  const release = async () => {
    await blocker.query('COMMIT');
    await blocker.end();
  };
  try {
    await until('the build holds the shard inside a batch', async () => {
      const { rows } = await blocker.query(
        `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE NOT l.granted AND a.application_name = 'shardflake lookup build'`,
      );
      return (rows[0] as { n: number }).n > 0 && (await shardLocked(shard));
    });
    assert.equal((await readLookups(catalog)).get(lookup)?.phase, 'backfill');
  } catch (error) {
    await release();
    throw error;
  }
  return { building, release };
}

async function verifiesClean(config: typeof plain): Promise<void> {
  const clients = await connectAll(config);
  try {
    assert.deepEqual(await verifyLookups(config, clients), []);
  } finally {
    await closeAll(clients);
  }
}

describe('a lookup build and a shard move exclude each other per shard', () => {
  it('move first: the build stops with SHARD_BUSY at the moving shard and writes nothing there; after the move it finishes', async () => {
    const shard = 1;
    const from = router.placement(shard).server;
    const to = from === 'a' ? 'b' : 'a';
    let held!: () => void;
    const isHeld = new Promise<void>((resolve) => {
      held = resolve;
    });
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    // The move holds its shard lock for its whole run; here it is held at its first recorded step.
    const moving = moveShard(plain, shard, to, {
      afterStep: async () => {
        held();
        await released;
      },
    });
    try {
      await isHeld;
      assert.ok(await shardLocked(shard));
      // The build itself (cluster migrate runs it after its own shard steps, which a move that starts after them
      // no longer meets).
      const error = await buildLookups(byEmail, { shardLockWaitMs: 300 }).then(
        () => assert.fail('the build ran beside a move of one of its shards'),
        (e: unknown) => e,
      );
      assert.ok(isShardflakeError(error, 'SHARD_BUSY'), String(error));
      assert.match(
        error.message,
        new RegExp(`building lookup user_email stopped at shard ${shard}: the shard is being moved`),
      );
      // Nothing of the lookup reached the moving shard, on either server.
      for (const server of servers) {
        const c = await connect(server.url);
        const { rows } = await c.query('SELECT to_regclass($1) IS NULL AS none', [
          `"${shardSchema(plain, shard)}"._shardflake_lookup_user_email`,
        ]);
        await c.end();
        assert.equal(
          (rows[0] as { none: boolean }).none,
          true,
          `entry table of shard ${shard} on ${server.name}`,
        );
      }
    } finally {
      release();
    }
    assert.equal((await moving).to, to);
    const built = await migrateCluster(byEmail);
    assert.deepEqual(
      built.lookups.map((l) => [l.lookup, l.alreadyBuilt, l.entriesWritten]),
      [['user_email', false, ids.length]],
    );
    await verifiesClean(byEmail);
  });

  it('build first: a move of the shard a backfill batch holds is refused; after the build it moves', async () => {
    const shard = 2;
    const from = router.placement(shard).server;
    const to = from === 'a' ? 'b' : 'a';
    const { building, release } = await buildHeldInABatch(byEmailAndName, shard, 'user_name', 10);
    try {
      await assert.rejects(moveShard(byEmailAndName, shard, to), (e: unknown) =>
        isShardflakeError(e, 'SHARD_BUSY'),
      );
      assert.equal(router.placement(shard).server, from);
    } finally {
      await release();
    }
    const result = await building;
    assert.deepEqual(
      result.lookups.map((l) => [l.lookup, l.alreadyBuilt]),
      [
        ['user_email', true],
        ['user_name', false],
      ],
    );
    assert.equal((await moveShard(byEmailAndName, shard, to)).to, to);
    await verifiesClean(byEmailAndName);
  });

  it('an entry shard that moves while a batch waits: the batch meets the old copy’s fence and runs again on the new map', async () => {
    // A third column to build a lookup on (one column has one lookup): each user's nick is its email.
    const nick = {
      version: 1,
      name: 'nick',
      sql: ['ALTER TABLE users ADD COLUMN nick text', 'UPDATE users SET nick = email'],
    };
    const lookups = {
      user_email: { table: 'users', column: 'email', unique: true },
      user_name: { table: 'users', column: 'name' },
    };
    await migrateCluster(testConfig(servers, { ...base, lookups, migrations: [nick] }));
    const config = testConfig(servers, {
      ...base,
      lookups: { ...lookups, user_nick: { table: 'users', column: 'nick' } },
      migrations: [nick],
    });
    // The batch's row shard, and an entry shard on the other server that some of its values belong to.
    const shard = 3;
    const home = router.placement(shard).server;
    const values = ids.flatMap((id, i) => (router.shardOfId(id) === shard ? [`e${i}@x`] : []));
    const entryShard = defined(
      [0, 1, 2].find(
        (s) => router.placement(s).server !== home && values.some((v) => shardForKey(v, 4) === s),
      ),
    );
    // One batch holds the whole shard; it has read the map (the entry shard on its old server) and waits.
    const { building, release } = await buildHeldInABatch(config, shard, 'user_nick', 100);
    try {
      assert.equal((await moveShard(config, entryShard, home)).to, home);
    } finally {
      await release();
    }
    const result = await building;
    assert.deepEqual(
      result.lookups.map((l) => [l.lookup, l.alreadyBuilt]),
      [
        ['user_email', true],
        ['user_name', true],
        ['user_nick', false],
      ],
    );
    await verifiesClean(config);
  });
});

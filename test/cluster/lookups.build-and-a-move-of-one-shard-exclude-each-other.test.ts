import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, isShardflakeError } from 'shardflake';
import { shardSchema } from '../../packages/shardflake/src/cluster/config.js';
import { initCluster } from '../../packages/shardflake/src/cluster/init.js';
import { migrateCluster } from '../../packages/shardflake/src/cluster/migrate.js';
import { SHARD_LOCK_CLASS } from '../../packages/shardflake/src/cluster/shard-lock.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * A lookup built by `cluster migrate` for a table that has rows, and shard moves, exclude each other per shard with
 * the move's lock (shard-lock.ts), on two servers with 4 shards:
 * - a shard held by a move (its lock taken, as a move takes it for its whole run) stops the build with SHARD_BUSY
 *   naming the lookup and the shard, the lookup stays unreadable, and a rerun after the move builds it;
 * - a build working on a shard (held inside the shard's scan: a row of it locked FOR UPDATE by another session,
 *   which the build's FOR SHARE read waits for) holds that shard's lock, so a move of it is refused with
 *   SHARD_BUSY and nothing moves; once the row is let go, the build finishes.
 */
const servers = await useServers(2);
const USERS = 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)';
const plain = testConfig(servers, { logicalShards: 4, tables: { users: USERS } });
const lookups = (name: string) => ({ [name]: { table: 'users', column: 'email', unique: true } });
let catalog: pg.Client;

before(async () => {
  await initCluster(plain);
  const router = await createRouter(plain, { listen: false, transactions: { recovery: false } });
  try {
    for (let shard = 0; shard < 4; shard++)
      for (let i = 0; i < 3; i++)
        await router.insert(
          'users',
          { name: `u${shard}${i}`, email: `u${shard}${i}@example.com` },
          { shard },
        );
  } finally {
    await router.close();
  }
  catalog = await connect(defined(servers[0]).url);
});
after(async () => {
  await catalog?.end();
});

describe('a lookup build and a move of the same shard exclude each other', () => {
  it('a shard held by a move stops the build with SHARD_BUSY; a rerun after the move builds the lookup', async () => {
    const config = testConfig(servers, {
      logicalShards: 4,
      tables: { users: USERS },
      lookups: lookups('by_email'),
    });
    const mover = await connect(defined(servers[0]).url);
    try {
      await mover.query('SELECT pg_advisory_lock($1::int, 2)', [SHARD_LOCK_CLASS]);
      await assert.rejects(
        migrateCluster(config),
        (e: unknown) =>
          isShardflakeError(e, 'SHARD_BUSY') &&
          /lookup by_email/.test(e.message) &&
          /shard 2/.test(e.message),
      );
    } finally {
      await mover.end();
    }
    const router = await createRouter(config, { listen: false, transactions: { recovery: false } });
    try {
      await assert.rejects(router.lookup('by_email', 'u21@example.com'), (e: unknown) =>
        isShardflakeError(e, 'LOOKUP_NOT_READY'),
      );
      await migrateCluster(config);
      const hit = await router.lookup('by_email', 'u21@example.com', { fetch: true });
      assert.equal(hit?.row.name, 'u21');
    } finally {
      await router.close();
    }
  });

  it('a build holding a shard refuses a move of it; the build then finishes', async () => {
    const config = testConfig(servers, {
      logicalShards: 4,
      tables: { users: USERS },
      lookups: { ...lookups('by_email'), by_name: { table: 'users', column: 'name', unique: true } },
    });
    const shard = 1;
    const { rows: placed } = await catalog.query('SELECT server FROM shardflake.shards WHERE shard = $1', [
      shard,
    ]);
    const home = (placed[0] as { server: string }).server;
    const url = defined(servers.find((s) => s.name === home)).url;
    const owner = await connect(url);
    const watch = await connect(url);
    const build = (async () => {
      await owner.query('BEGIN');
      await owner.query(
        `SELECT id FROM "${shardSchema(config, shard)}".users ORDER BY id LIMIT 1 FOR UPDATE`,
      );
      return migrateCluster(config, { lookupBatchSize: 1 });
    })();
    try {
      // The build waits on the row lock inside shard 1's scan, holding the shard's lock.
      for (let tries = 0; ; tries++) {
        if (tries > 3000) assert.fail('the build never waited inside shard 1 holding its lock');
        const { rows } = await catalog.query(
          `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND granted`,
          [SHARD_LOCK_CLASS, shard],
        );
        const { rows: waiting } = await watch.query(
          `SELECT 1 FROM pg_stat_activity WHERE application_name = 'shardflake lookup build' AND wait_event_type = 'Lock'`,
        );
        if (rows.length > 0 && waiting.length > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await assert.rejects(moveShard(config, shard, home === 'a' ? 'b' : 'a'), (e: unknown) =>
        isShardflakeError(e, 'SHARD_BUSY'),
      );
    } finally {
      await owner.query('COMMIT');
      await Promise.all([owner.end(), watch.end()]);
    }
    const result = await build;
    assert.deepEqual(
      result.lookups.map((l) => [l.lookup, l.alreadyBuilt]),
      [
        ['by_email', true],
        ['by_name', false],
      ],
    );
  });
});

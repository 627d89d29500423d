import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { SHARD_LOCK_CLASS } from '../../packages/shardflake/src/fence/shard-lock.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

const servers = await useServers(2);
const [a, b] = servers as [(typeof servers)[0], (typeof servers)[0]];
const addLikes = { version: 1, name: 'likes', sql: 'ALTER TABLE photos ADD COLUMN likes integer' };
const addTags = { version: 2, name: 'tags', sql: 'ALTER TABLE photos ADD COLUMN tags text' };

async function versionOf(url: string, schema: string): Promise<number> {
  const c = await connect(url);
  const { rows } = await c.query(`SELECT max(version)::int AS v FROM "${schema}"._shardflake_migrations`);
  await c.end();
  return (rows[0] as { v: number }).v;
}

describe('cluster migrate and shard moves exclude each other per shard', () => {
  it('does not migrate a shard whose move lock is held (a move that has not marked it moving yet)', async () => {
    await initCluster(testConfig(servers, { logicalShards: 4 }));
    const mover = await connect(a.url);
    await mover.query('SELECT pg_advisory_lock($1::int, 1)', [SHARD_LOCK_CLASS]);
    const result = await migrateCluster(testConfig(servers, { logicalShards: 4, migrations: [addLikes] }), {
      shardLockWaitMs: 300,
    });
    await mover.end();
    assert.equal(result.migrated, 3);
    assert.deepEqual(
      result.failed.map((f) => f.shard),
      [1],
    );
    assert.match(defined(result.failed[0]).error, /locked/);
    assert.equal(await versionOf(a.url, 'shard_0001'), 0);
  });

  it('refuses to start a move on a shard while its migration step runs', async () => {
    const config = testConfig(servers, { logicalShards: 4, migrations: [addLikes, addTags] });
    // Shard 2 (on b) is held mid-migration: its bookkeeping table is locked by another transaction.
    const blocker = await connect(b.url);
    await blocker.query('BEGIN; LOCK TABLE shard_0002._shardflake_migrations IN ACCESS EXCLUSIVE MODE');
    const migrating = migrateCluster(config);
    const catalog = await connect(a.url);
    const lockedByMigrate = async () =>
      (
        await catalog.query(
          "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int::oid AND objid = 2 AND granted",
          [SHARD_LOCK_CLASS],
        )
      ).rows[0].n === 1;
    for (let i = 0; !(await lockedByMigrate()); i++) {
      assert.ok(i < 500, 'migrate never took shard 2 lock');
      await new Promise((r) => setTimeout(r, 20));
    }
    await assert.rejects(moveShard(config, 2, 'a'), (e: unknown) => isShardflakeError(e, 'SHARD_BUSY'));
    await blocker.query('COMMIT');
    await blocker.end();
    await catalog.end();
    const result = await migrating;
    assert.deepEqual(result.failed, []);
    assert.equal(await versionOf(b.url, 'shard_0002'), 2);
    // Once the migration is done the shard moves as usual.
    const moved = await moveShard(config, 2, 'a');
    assert.equal(moved.to, 'a');
  });
});

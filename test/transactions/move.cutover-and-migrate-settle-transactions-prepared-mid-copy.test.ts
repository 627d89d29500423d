import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { crashRouterAt, useMoveCluster } from './support.js';

// Shards 0–2 on a (the catalog), shards 3–5 on b; c is where shards move. A router killed -9 mid-commit leaves a
// prepared transaction on b holding locks in a shard's tables: the move's cutover must settle it by its decision
// (never wait for it forever, never lose it), and so must a migration.
const { configFile, router, withC, tagsOn, ours } = await useMoveCluster();

describe('moves and migrations with in-doubt transactions on their shards', () => {
  it('one prepared while the shard is copying is settled at the cutover, and its row reaches the new home', async () => {
    let crashed = false;
    const result = await moveShard(withC(), 5, 'c', {
      afterStep: async (step) => {
        // After the slot exists and the copy is done: the transaction's changes are decoded at COMMIT PREPARED.
        if (step !== 'synced' || crashed) return;
        crashed = true;
        await crashRouterAt(configFile, 'after-decision', [0, 5], 'while-copying');
        assert.equal((await ours('b')).length, 1);
      },
    });
    assert.ok(crashed);
    assert.equal(result.to, 'c');
    await router.refresh();
    assert.deepEqual(await ours('b'), []);
    assert.deepEqual(await tagsOn(5), ['while-copying']);
  });

  it('a migration settles them before its DDL instead of waiting on their locks', async () => {
    await crashRouterAt(configFile, 'after-decision', [0, 5], 'before-migrate');
    assert.equal((await ours('c')).length, 1, 'c (shard 5 lives there now) holds it prepared');
    const migrated = await migrateCluster(
      withC({
        migrations: [{ version: 1, name: 'note', sql: 'ALTER TABLE marks ADD COLUMN note text' }],
      }),
    );
    assert.deepEqual(migrated.failed, []);
    assert.deepEqual(await ours('c'), []);
    assert.ok((await tagsOn(5)).includes('before-migrate'));
  });
});

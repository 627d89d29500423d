import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createRouter } from 'shardflake';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { crashRouterAt, useMoveCluster } from './support.js';

// Shards 0–2 on a (the catalog), shards 3–5 on b; c is where shards move. A router killed -9 mid-commit leaves a
// prepared transaction on b holding locks in a shard's tables: the move's cutover must settle it by its decision
// (never wait for it forever, never lose it), and so must a migration.
const { configFile, router, withC, tagsOn, ours } = await useMoveCluster();

describe('moves and migrations with in-doubt transactions on their shards', () => {
  it('a move settles a committed-but-prepared transaction before its cutover, and the row moves with the shard', async () => {
    await crashRouterAt(configFile, 'after-decision', [0, 3], 'decided');
    assert.equal(
      (await ours('b')).length,
      1,
      'b holds the transaction prepared, with a commit decision on a',
    );
    assert.deepEqual(await tagsOn(3), []);

    // A router that will not hear of the move (no LISTEN): its next transaction meets the fenced old copy.
    const stale = await createRouter(withC(), { listen: false, transactions: { recovery: false } });
    const result = await moveShard(withC(), 3, 'c');
    assert.equal(result.to, 'c');
    await router.refresh();
    assert.equal(router.placement(3).server, 'c');
    try {
      assert.equal(stale.placement(3).server, 'b');
      let runs = 0;
      await stale.withShards([{ shard: 0 }, { shard: 3 }], async (sessions) => {
        runs++;
        for (const s of sessions) await s.query(`INSERT INTO marks (tag) VALUES ('stale')`);
      });
      assert.equal(
        runs,
        2,
        'the fenced copy refused the write, and the whole transaction ran again on the new home',
      );
      assert.equal(stale.placement(3).server, 'c');
    } finally {
      await stale.close();
    }
    assert.deepEqual(await ours('b'), []);
    assert.ok((await tagsOn(3)).includes('stale'));
    assert.deepEqual(
      (await tagsOn(0)).filter((t) => t === 'stale'),
      ['stale'],
      'the first attempt left nothing on shard 0',
    );
    assert.deepEqual(await ours('b'), [], 'settled, not left behind on the fenced copy');
    assert.deepEqual(
      (await tagsOn(3)).filter((t) => t === 'decided'),
      ['decided'],
      'committed, and copied to the new home',
    );
    assert.ok((await tagsOn(0)).includes('decided'));
  });

  it('a move rolls back an undecided one whose coordinator is gone (after the in-doubt grace), and moves', async () => {
    await crashRouterAt(configFile, 'after-first-prepare', [0, 4], 'undecided');
    assert.equal((await ours('b')).length, 1);
    const result = await moveShard(withC(), 4, 'c');
    assert.equal(result.to, 'c');
    await router.refresh();
    assert.deepEqual(await ours('b'), []);
    assert.deepEqual(await tagsOn(4), []);
    assert.ok(!(await tagsOn(0)).includes('undecided'));
  });
});

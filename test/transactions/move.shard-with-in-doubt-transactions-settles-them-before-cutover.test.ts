import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRouter, type Router } from 'shardflake';
import { validateConfig } from '../../packages/shardflake/src/cluster/config.js';
import { initCluster } from '../../packages/shardflake/src/cluster/init.js';
import { migrateCluster } from '../../packages/shardflake/src/cluster/migrate.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { useServers } from '../support/postgres.js';
import { crashRouterAt, preparedGids } from './support.js';

// Shards 0–2 on a (the catalog), shards 3–5 on b; c is where shards move. A router killed -9 mid-commit leaves a
// prepared transaction on b holding locks in a shard's tables: the move's cutover must settle it by its decision
// (never wait for it forever, never lose it), and so must a migration.
const servers = await useServers(3);
const urls = Object.fromEntries(servers.map((s) => [s.name, s.url])) as Record<'a' | 'b' | 'c', string>;
const raw = {
  servers: { a: urls.a, b: urls.b },
  catalog: 'a',
  logicalShards: 6,
  epoch: '2024-01-01T00:00:00Z',
  tables: { marks: 'CREATE TABLE marks (id bigint PRIMARY KEY DEFAULT next_id(), tag text NOT NULL)' },
};
const dir = await mkdtemp(join(tmpdir(), 'shardflake-tx-'));
const configFile = join(dir, 'cluster.json');
let router: Router;
const withC = (extra: Record<string, unknown> = {}) =>
  validateConfig({ ...raw, servers: urls, ...extra }, 'test-config');

async function tagsOn(shard: number): Promise<string[]> {
  return router.withShard({ shard }, async (s) => {
    const { rows } = await s.query<{ tag: string }>('SELECT tag FROM marks ORDER BY tag');
    return rows.map((r) => r.tag);
  });
}
const ours = async (name: 'a' | 'b' | 'c') =>
  (await preparedGids(urls[name])).filter((g) => g.startsWith('sf:'));

before(async () => {
  await initCluster(validateConfig(raw, 'test-config'));
  await writeFile(configFile, JSON.stringify({ ...raw, servers: urls }));
  router = await createRouter(withC(), { transactions: { recovery: false } });
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5].map((s) => router.placement(s).server),
    ['a', 'a', 'a', 'b', 'b', 'b'],
  );
});
after(async () => {
  await router?.close();
  await rm(dir, { recursive: true, force: true });
});

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
    await crashRouterAt(configFile, 'after-decision', [0, 3], 'before-migrate');
    assert.equal((await ours('c')).length, 1, 'c (shard 3 lives there now) holds it prepared');
    const migrated = await migrateCluster(
      withC({
        migrations: [{ version: 1, name: 'note', sql: 'ALTER TABLE marks ADD COLUMN note text' }],
      }),
    );
    assert.deepEqual(migrated.failed, []);
    assert.deepEqual(await ours('c'), []);
    assert.ok((await tagsOn(3)).includes('before-migrate'));
  });
});

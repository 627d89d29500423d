import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { cleanupCluster } from '../../packages/shardflake/src/move/cleanup.js';
import { moveSets } from '../../packages/shardflake/src/move/move.js';
import { rebalanceCluster } from '../../packages/shardflake/src/move/rebalance.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';
import { countRows, makeCluster, rawConfig, replicationLeftovers, withClient } from './fixture.js';

async function shardsPerServer(url: string): Promise<Record<string, number>> {
  const c = await connect(url);
  try {
    const counts: Record<string, number> = {};
    for (const s of (await readShardMap(c)).shards) counts[s.server] = (counts[s.server] ?? 0) + 1;
    return counts;
  } finally {
    await c.end();
  }
}

/**
 * Two sets on distinct server pairs (a → c, b → d) must run side by side: each waits, once subscribed, until the
 * other is subscribed too. Run one after the other, the first would wait for ever (the barrier fails it after 20 s).
 * Then server c is decommissioned: every shard leaves it for the others, by a plan weighted with --weight-sql.
 */
test('two server pairs move their sets side by side; a decommission by user weight empties a server', async () => {
  const servers = await useServers(4);
  const [a, b] = servers as [(typeof servers)[0], (typeof servers)[0]];
  await makeCluster([a, b], 8); // shards 0–3 on a, 4–7 on b
  const config = validateConfig(rawConfig(servers, 8), 'four servers');
  for (const shard of [0, 1, 2, 3, 4, 5, 6, 7]) {
    await withClient(config.servers[shard < 4 ? 'a' : 'b'] as string, (c) =>
      c.query(
        `INSERT INTO "${shardSchema(config, shard)}".items (note, n) SELECT 'row', g FROM generate_series(1, ${100 * (shard + 1)}) g`,
      ),
    );
  }

  let subscribed = 0;
  let bothSubscribed: () => void = () => {};
  const barrier = new Promise<void>((resolve) => {
    bothSubscribed = resolve;
  });
  const results = await moveSets(
    config,
    [
      { shard: 0, to: 'c' },
      { shard: 1, to: 'c' },
      { shard: 4, to: 'd' },
      { shard: 5, to: 'd' },
    ],
    {
      afterStep: async (step) => {
        if (step !== 'subscribed') return;
        if (++subscribed === 2) bothSubscribed();
        const timeout = new Promise<never>((_, reject) =>
          setTimeout(
            () => reject(new Error('the other set never got subscribed: sets ran one after another')),
            20_000,
          ),
        );
        await Promise.race([barrier, timeout]);
      },
    },
  );
  assert.equal(subscribed, 2);
  assert.deepEqual(
    results.map((r) => [r.shard, r.from, r.to]),
    [
      [0, 'a', 'c'],
      [1, 'a', 'c'],
      [4, 'b', 'd'],
      [5, 'b', 'd'],
    ],
  );
  assert.equal(new Set(results.map((r) => r.batchId)).size, 2, 'one set per pair');
  assert.deepEqual(await shardsPerServer(a.url), { a: 2, b: 2, c: 2, d: 2 });

  // The fenced old copies on a and b go first (a shard may come back to a server only once its old copy is gone).
  assert.equal((await cleanupCluster(config)).droppedCopies.length, 4);
  // Decommission c, weighing shards by their rows (the user's SQL, run in each shard schema).
  const plan = await rebalanceCluster(config, {
    decommission: ['c'],
    weightSql: 'SELECT count(*) FROM items',
    dryRun: true,
  });
  assert.equal(plan.by, 'weight');
  assert.deepEqual(plan.weightBefore, { a: 300 + 400, b: 700 + 800, c: 100 + 200, d: 500 + 600 });
  assert.equal(plan.after.c, 0);
  const done = await rebalanceCluster(config, {
    decommission: ['c'],
    weightSql: 'SELECT count(*) FROM items',
  });
  assert.deepEqual(
    done.moves.map((m) => m.from),
    ['c', 'c'],
  );
  const counts = await shardsPerServer(a.url);
  assert.equal(counts.c, undefined, 'server c holds no shard');
  for (const m of done.moves) {
    assert.equal(
      await countRows(config.servers[m.to] as string, shardSchema(config, m.shard)),
      100 * (m.shard + 1),
    );
  }
  // c's heaviest shard (1: 200 rows) goes first to the lightest server (a: 700), then shard 0 (100) to the lightest
  // again (a: 900 < d: 1100); after that no single move narrows b's gap (b's shards are 700 and 800 > 500).
  assert.deepEqual(
    done.moves.map((m) => [m.shard, m.to]),
    [
      [0, 'a'],
      [1, 'a'],
    ],
  );
  for (const url of Object.values(config.servers)) assert.deepEqual(await replicationLeftovers(url), []);
});

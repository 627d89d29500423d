import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { isInterrupted, moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { makeCluster, placement, rawConfig, sleep, withClient } from './fixture.js';

/** Issue 21, item 4: what a frozen mover, a slow writer and a resumed cutover can cost the application's writes. */
const servers = await useServers(2);
const config = await makeCluster(servers, 4);
const a = config.servers.a as string;

async function rerun(shard: number, to: string) {
  for (let i = 0; ; i++) {
    try {
      return await moveShard(config, shard, to);
    } catch (error) {
      if (!isShardflakeError(error, 'SHARD_BUSY') || i > 60) throw error;
      await sleep(100);
    }
  }
}

test('a mover frozen (SIGSTOP) inside the write pause releases the shard within --pause-bound: a waiting insert goes through on the source, and a rerun finishes the move', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-frozen-'));
  const file = join(dir, 'config.json');
  await writeFile(file, JSON.stringify(rawConfig(servers, 4)));
  const schema = shardSchema(config, 0);
  const mover = startCli(
    ['cluster', 'move', '--config', file, '--shard', '0', '--to', 'b', '--pause-bound', '1500'],
    {
      SHARDFLAKE_MOVE_HOLD_AFTER: 'cutover-locked',
    },
  );
  await mover.waitFor('stderr', /holding after cutover-locked/, 60_000);
  mover.child.kill('SIGSTOP');
  const started = performance.now();
  await withClient(a, (c) =>
    c.query(`INSERT INTO "${schema}".items (note) VALUES ('waited for a frozen mover')`),
  );
  const waitedMs = performance.now() - started;
  mover.child.kill('SIGKILL');
  await mover.done;
  assert.ok(waitedMs >= 700, `the insert waited on the frozen mover's lock (${Math.round(waitedMs)} ms)`);
  assert.ok(
    waitedMs < 4000,
    `and no longer than the bound allows (${Math.round(waitedMs)} ms, bound 1500 ms)`,
  );
  assert.deepEqual(await placement(config, 0), { server: 'a', state: 'moving' });
  const done = await rerun(0, 'b');
  assert.equal(done.resumedFrom, 'synced');
  assert.deepEqual(await placement(config, 0), { server: 'b', state: 'active' });
  process.stdout.write(`# frozen mover: insert waited ${Math.round(waitedMs)} ms with --pause-bound 1500\n`);
});

test('a router insert that waited on the cutover lock longer than writeRetryMs tries the new home once and succeeds', async () => {
  const router = await createRouter(config, { writeRetryMs: 100 });
  try {
    let insert: Promise<bigint> | undefined;
    const moved = await moveShard(config, 1, 'b', {
      afterStep: async (step) => {
        if (step !== 'cutover-locked') return;
        insert = router.insert('items', { note: 'waited on the lock' }, { shard: 1 });
        await sleep(800);
      },
    });
    assert.equal(moved.to, 'b');
    const id = await (insert as Promise<bigint>);
    const onB = await withClient(
      config.servers.b as string,
      async (c) =>
        (await c.query(`SELECT note FROM "${shardSchema(config, 1)}".items WHERE id = $1`, [id])).rows,
    );
    assert.deepEqual(onB, [{ note: 'waited on the lock' }]);
  } finally {
    await router.close();
  }
});

test('a rerun after the apply worker lost its connection waits for streaming before the pause: the resumed cutover pauses writes briefly', async () => {
  await assert.rejects(moveShard(config, 3, 'a', { stopAfter: 'synced' }), (e) => isInterrupted(e));
  // The source's walsender for the move is ended: the apply worker reconnects only after wal_retrieve_retry_interval.
  const b = config.servers.b as string;
  const ended = await withClient(
    b,
    async (c) =>
      (
        await c.query(
          "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_replication WHERE application_name LIKE 'sf_move_%'",
        )
      ).rows,
  );
  assert.ok(ended.length >= 1, 'the move had a walsender on the source');
  const resumed = await rerun(3, 'a');
  assert.equal(resumed.resumedFrom, 'synced');
  // Waiting for the worker inside the pause would take wal_retrieve_retry_interval (5 s); the bound leaves room for
  // a loaded machine (580 ms measured alone, 1,100 ms with the whole suite running).
  assert.ok((resumed.pauseMs ?? Infinity) < 3000, `resumed pause ${resumed.pauseMs} ms`);
  process.stdout.write(
    `# resumed cutover after the walsender was ended: pause ${Math.round(resumed.pauseMs ?? 0)} ms ${JSON.stringify(resumed.pauseSteps)}\n`,
  );
});

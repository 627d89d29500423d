import assert from 'node:assert/strict';
import { test } from 'node:test';
import type pg from 'pg';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { cleanupCluster } from '../../packages/shardflake/src/move/cleanup.js';
import { isInterrupted, type MoveStep, moveShard } from '../../packages/shardflake/src/move/move.js';
import { useServers } from '../support/postgres.js';
import {
  countRows,
  makeCluster,
  placement,
  replicationLeftovers,
  schemaOn,
  sleep,
  withClient,
} from './fixture.js';

/** Servers on which a write to the shard's copy would succeed (tried inside a transaction that is rolled back). */
async function writableCopies(urls: Record<string, string>, schema: string): Promise<string[]> {
  const writable: string[] = [];
  for (const [name, url] of Object.entries(urls)) {
    if (!(await schemaOn(url, schema))) continue;
    const ok = await withClient(url, async (c: pg.Client) => {
      await c.query('BEGIN');
      try {
        await c.query(`INSERT INTO "${schema}".items (note) VALUES ('probe')`);
        return true;
      } catch (error) {
        assert.equal(
          (error as { code?: string }).code,
          'SF001',
          `a refused write on ${name} is refused by the fence`,
        );
        return false;
      } finally {
        await c.query('ROLLBACK');
      }
    });
    if (ok) writable.push(name);
  }
  return writable;
}

/** Reruns until the crashed run's catalog session (and its advisory lock) is gone on the server. */
async function rerun(config: Parameters<typeof moveShard>[0], shard: number, to: string) {
  for (let i = 0; ; i++) {
    try {
      return await moveShard(config, shard, to);
    } catch (error) {
      if (!isShardflakeError(error, 'SHARD_BUSY') || i > 50) throw error;
      await sleep(50);
    }
  }
}

const STEPS: MoveStep[] = [
  'planned',
  'prepared',
  'subscribed',
  'synced',
  'cutover-locked',
  'fenced',
  'switched',
];

test('a move killed after any step leaves exactly one writable copy (none only while fenced for cutover), and the rerun finishes it with every row and no replication leftovers', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 4);
  const shard = 1;
  const schema = shardSchema(config, shard);
  let home = 'a';
  let rows = 0;
  for (const step of STEPS) {
    const to = home === 'a' ? 'b' : 'a';
    await withClient(config.servers[home] as string, (c) =>
      c.query(
        `INSERT INTO "${schema}".items (note, n) SELECT 'step ${step}', g FROM generate_series(1, 500) g`,
      ),
    );
    rows += 500;

    await assert.rejects(moveShard(config, shard, to, { stopAfter: step }), (e) => isInterrupted(e), step);
    const switched = step === 'switched';
    assert.equal((await placement(config, shard)).server, switched ? to : home, `catalog after ${step}`);
    const writable = await writableCopies(config.servers, schema);
    if (step === 'fenced')
      assert.deepEqual(writable, [], 'killed between fence and switch: writes pause (SF001)');
    else assert.deepEqual(writable, [switched ? to : home], `one writable copy after ${step}`);

    const result = await rerun(config, shard, to);
    assert.ok(result.resumedFrom !== null, `the rerun resumed the move killed after ${step}`);
    assert.deepEqual(await placement(config, shard), { server: to, state: 'active' });
    assert.equal(await countRows(config.servers[to] as string, schema), rows, `rows after ${step}`);
    assert.deepEqual(await writableCopies(config.servers, schema), [to]);
    for (const url of Object.values(config.servers))
      assert.deepEqual(await replicationLeftovers(url), [], step);

    const cleaned = await cleanupCluster(config);
    assert.deepEqual(
      cleaned.droppedCopies.map((c) => [c.server, c.schema, c.fenced]),
      [[home, schema, true]],
    );
    assert.equal(await schemaOn(config.servers[home] as string, schema), false);
    home = to;
  }
});

test('cluster cleanup rolls back a move whose process died before the switch: shard active on its source, target copy and slots gone', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 4);
  const shard = 0;
  const schema = shardSchema(config, shard);
  await withClient(config.servers.a as string, (c) =>
    c.query(`INSERT INTO "${schema}".items (note) SELECT 'x' FROM generate_series(1, 1000)`),
  );
  await assert.rejects(moveShard(config, shard, 'b', { stopAfter: 'subscribed' }), (e) => isInterrupted(e));
  assert.equal((await placement(config, shard)).state, 'moving');
  let cleaned: Awaited<ReturnType<typeof cleanupCluster>> | undefined;
  for (let i = 0; i < 50 && !cleaned?.settled.length; i++) {
    cleaned = await cleanupCluster(config);
    if (!cleaned.settled.length) await sleep(50);
  }
  assert.deepEqual(
    cleaned?.settled.map((s) => s.outcome),
    ['rolled_back'],
  );
  assert.deepEqual(await placement(config, shard), { server: 'a', state: 'active' });
  assert.equal(await schemaOn(config.servers.b as string, schema), false);
  assert.equal(await countRows(config.servers.a as string, schema), 1000);
  assert.deepEqual(await writableCopies(config.servers, schema), ['a']);
  for (const url of Object.values(config.servers)) assert.deepEqual(await replicationLeftovers(url), []);
});

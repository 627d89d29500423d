import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ClusterConfig } from '../../packages/shardflake/src/config/config.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { cleanupCluster } from '../../packages/shardflake/src/move/cleanup.js';
import { isInterrupted, moveShards } from '../../packages/shardflake/src/move/move.js';
import type { MoveStep } from '../../packages/shardflake/src/move/options.js';
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

/** Servers where an insert into the shard's copy would succeed (tried in a transaction that is rolled back). */
async function writableCopies(config: ClusterConfig, schema: string): Promise<string[]> {
  const writable: string[] = [];
  for (const [name, url] of Object.entries(config.servers)) {
    if (!(await schemaOn(url, schema))) continue;
    const ok = await withClient(url, async (c) => {
      await c.query('BEGIN');
      try {
        await c.query(`INSERT INTO "${schema}".items (note) VALUES ('probe')`);
        return true;
      } catch (error) {
        assert.equal(
          (error as { code?: string }).code,
          'SF001',
          `a refused write on ${name} meets the fence`,
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

/** Reruns until the killed run's catalog session (and its shard locks) is gone on the server. */
async function rerun(config: ClusterConfig, shards: number[], to: string) {
  for (let i = 0; ; i++) {
    try {
      return await moveShards(config, shards, to);
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

/**
 * A set of 2 shards cut over in 2 groups of 1, killed after each step in turn (a kill after `fenced` or `switched`
 * lands between the groups: one shard has moved, the other has not). After each kill every shard has exactly one writable
 * copy (none while fenced and not yet switched); the rerun resumes the set, every row arrives, and no slot,
 * publication or subscription is left on either server.
 */
test('a set of shards killed after each step resumes on rerun: one writable copy per shard at every point, every row moved, no replication leftovers', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 8);
  const shards = [0, 1]; // both on server a after init
  let home = 'a';
  let rows = 0;
  for (const step of STEPS) {
    const to = home === 'a' ? 'b' : 'a';
    await withClient(config.servers[home] as string, async (c) => {
      for (const shard of shards) {
        await c.query(
          `INSERT INTO "${shardSchema(config, shard)}".items (note, n) SELECT 'step ${step}', g FROM generate_series(1, 100) g`,
        );
      }
    });
    rows += 100;
    await assert.rejects(
      moveShards(config, shards, to, { stopAfter: step, cutoverGroupShards: 1 }),
      (e) => isInterrupted(e),
      step,
    );
    let switchedNow = 0;
    for (const shard of shards) {
      const schema = shardSchema(config, shard);
      const at = (await placement(config, shard)).server;
      const writable = await writableCopies(config, schema);
      if (at === to) {
        switchedNow++;
        assert.deepEqual(writable, [to], `shard ${shard} after ${step}: switched, only the target writable`);
      } else if (writable.length === 0) {
        assert.ok(
          step === 'fenced',
          `shard ${shard}: no writable copy only between fence and switch (${step})`,
        );
      } else assert.deepEqual(writable, [home], `shard ${shard} after ${step}: only the source writable`);
    }
    assert.equal(switchedNow, step === 'switched' ? 1 : 0, `shards switched when killed after ${step}`);

    const results = await rerun(config, shards, to);
    assert.ok(
      results.every((r) => r.resumedFrom !== null),
      `the rerun resumed the set killed after ${step}`,
    );
    for (const shard of shards) {
      const schema = shardSchema(config, shard);
      assert.deepEqual(await placement(config, shard), { server: to, state: 'active' });
      assert.equal(
        await countRows(config.servers[to] as string, schema),
        rows,
        `shard ${shard} rows after ${step}`,
      );
      assert.deepEqual(await writableCopies(config, schema), [to]);
    }
    for (const url of Object.values(config.servers))
      assert.deepEqual(await replicationLeftovers(url), [], step);
    const cleaned = await cleanupCluster(config);
    assert.equal(
      cleaned.droppedCopies.length,
      shards.length,
      `cleanup drops the ${shards.length} old copies`,
    );
    assert.ok(cleaned.droppedCopies.every((c) => c.server === home && c.fenced));
    home = to;
  }
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { faultsFound, runFaultsBench } from '../../packages/cli/src/bench/faults.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import type { ClusterConfig } from '../../packages/shardflake/src/config/config.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { connectServer } from '../../packages/shardflake/src/topology/connections.js';

/**
 * bench faults counts what it claims to: a tiny run of its control scenario (a move under writers, no fault) is
 * damaged after cleanup, before the count — an acknowledged row deleted from its home, another acknowledged row
 * inserted a second time, and a writable copy of a shard made on a server the catalog does not place it on — and
 * the result must show exactly one lost, one duplicated and that shard writable on both servers, and count as a
 * failed run.
 */
async function onServer(config: ClusterConfig, server: string, sql: string, values: unknown[] = []) {
  const client = await connectServer(config, server);
  try {
    return (await client.query(sql, values)).rows;
  } finally {
    await client.end();
  }
}

test('bench faults counts a deleted acknowledged row as lost, a second row with the same token as duplicated, and a second writable copy as a double-writable shard', async () => {
  let damaged: { lostId: bigint; strayShard: number } | undefined;
  const result = await runFaultsBench({
    scenarios: ['control'],
    async beforeTally(_stage, config, log) {
      const catalog = await connectServer(config, config.catalog);
      const map = await readShardMap(catalog).finally(() => catalog.end());
      const home = (shard: number) => map.shards.find((s) => s.shard === shard) as (typeof map.shards)[0];
      const [lost, doubled] = [log.acknowledged[0], log.acknowledged.at(-1)];
      assert.ok(lost && doubled && lost.id !== doubled.id, 'the writers were acknowledged');
      const at = home(lost.shard);
      await onServer(config, at.server, `DELETE FROM ${qualified(at.schema, 'items')} WHERE id = $1`, [
        lost.id,
      ]);
      const again = home(doubled.shard);
      await onServer(
        config,
        again.server,
        `INSERT INTO ${qualified(again.schema, 'items')} (note) VALUES ($1)`,
        [doubled.token],
      );
      const onB = map.shards.find((s) => s.server === 'b') as (typeof map.shards)[0];
      await onServer(
        config,
        'a',
        `CREATE SCHEMA ${onB.schema}; CREATE TABLE ${qualified(onB.schema, 'items')} (id bigserial PRIMARY KEY, note text)`,
      );
      damaged = { lostId: lost.id, strayShard: onB.shard };
    },
  });
  const [control] = result.scenarios;
  assert.ok(control && damaged);
  assert.ok(control.acknowledged > 10, `acknowledged ${control.acknowledged}`);
  assert.equal(control.lost, 1);
  assert.match(control.lostExamples[0] ?? '', new RegExp(`id ${damaged.lostId} `));
  assert.equal(control.duplicated, 1);
  assert.deepEqual(control.doubleWritable, [{ shard: damaged.strayShard, nodes: ['a', 'b'] }]);
  assert.equal(faultsFound(result.scenarios), true);
  assert.equal(result.faultsFound, true);
  assert.ok(control.checks >= 2, 'the nodes were checked after the fault and after cleanup');
});

test('bench faults refuses an unknown scenario with one line naming the scenarios it has', () => {
  const run = spawnSync(
    process.execPath,
    ['packages/cli/dist/cli/main.js', 'bench', 'faults', '--scenarios', 'control,no-such-thing'],
    { encoding: 'utf8' },
  );
  assert.notEqual(run.status, 0);
  assert.equal(run.stdout, '');
  assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
  assert.match(run.stderr, /no scenario no-such-thing \(scenarios: control, failover-in-the-pause/);
});

import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ClusterConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { moveShards } from '../../packages/shardflake/src/move/move.js';
import { rebalanceCluster } from '../../packages/shardflake/src/move/rebalance.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { makeCluster, rawConfig, replicationLeftovers, withClient } from './fixture.js';

/** What a refused request must leave as it was: no move recorded, every shard where init put it, active. */
async function untouched(config: ClusterConfig): Promise<void> {
  await withClient(config.servers[config.catalog] as string, async (c) => {
    const { rows } = await c.query(
      "SELECT count(*)::int AS n FROM shardflake.shards WHERE state <> 'active' OR server <> (CASE WHEN shard < 4 THEN 'a' ELSE 'b' END)",
    );
    assert.equal((rows[0] as { n: number }).n, 0, 'every shard still where it was, active');
    const table = await c.query("SELECT to_regclass('shardflake.moves') IS NOT NULL AS ok");
    if ((table.rows[0] as { ok: boolean }).ok) {
      const moves = await c.query('SELECT count(*)::int AS n FROM shardflake.moves');
      assert.equal((moves.rows[0] as { n: number }).n, 0, 'no move recorded');
    }
  });
  for (const url of Object.values(config.servers)) assert.deepEqual(await replicationLeftovers(url), []);
}

test('bad set moves are refused with one clear error and nothing started: duplicates, unknown shards, a target already holding some, no server left by a decommission, a throttle of 0, too few replication slots', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 8); // shards 0–3 on a, 4–7 on b
  const refused = async (work: Promise<unknown>, code: string, pattern: RegExp) => {
    await assert.rejects(work, (e) => {
      assert.ok(isShardflakeError(e), String(e));
      assert.equal(e.code, code, e.message);
      assert.match(e.message, pattern);
      assert.doesNotMatch(e.message, /\n/, 'one line');
      return true;
    });
    await untouched(config);
  };
  await refused(moveShards(config, [1, 2, 1], 'b'), 'INVALID_ARGUMENT', /shard 1 more than once/);
  await refused(
    moveShards(config, [1, 9, 12], 'b'),
    'UNKNOWN_SHARD',
    /shards 9, 12 are not among the cluster's 8 logical shards/,
  );
  await refused(
    moveShards(config, [1, 2, 5], 'b'),
    'INVALID_ARGUMENT',
    /server b already holds shard 5; nothing was moved/,
  );
  await refused(moveShards(config, [], 'b'), 'INVALID_ARGUMENT', /empty/);
  await refused(
    moveShards(config, [1], 'b', { throttle: { rowsPerSecond: 0 } }),
    'INVALID_ARGUMENT',
    /above 0/,
  );
  await refused(
    rebalanceCluster(config, { decommission: ['a', 'b'] }),
    'INVALID_ARGUMENT',
    /decommissioning a, b would leave no server/,
  );
  await refused(
    rebalanceCluster(config, { decommission: ['zz'] }),
    'UNKNOWN_SERVER',
    /cannot decommission server "zz"/,
  );

  // Every replication slot of the source taken: the plan is refused before any shard is marked moving.
  await withClient(config.servers.a as string, (c) =>
    c.query(
      "SELECT pg_create_physical_replication_slot('filler_' || g) FROM generate_series(1, current_setting('max_replication_slots')::int) g",
    ),
  );
  await assert.rejects(moveShards(config, [0, 1], 'b'), (e) => {
    assert.ok(isShardflakeError(e, 'NOT_SUPPORTED'), String(e));
    assert.match(e.message, /server a .*replication slot.*max_replication_slots=32, 32 in use/);
    return true;
  });
  await withClient(config.servers.a as string, (c) =>
    c.query(
      "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'filler\\_%'",
    ),
  );
  await untouched(config);

  // The CLI: one line on stderr, exit code 2.
  const file = join(await mkdtemp(join(tmpdir(), 'shardflake-set-')), 'config.json');
  await writeFile(file, JSON.stringify(rawConfig(servers, 8)));
  for (const [args, code] of [
    [['move', '--shard', '1,2,2', '--to', 'b'], 'INVALID_ARGUMENT'],
    [['move', '--shard', '1,2', '--to', 'b', '--throttle', '0MB/s'], 'INVALID_ARGUMENT'],
    [['rebalance', '--decommission', 'a,b'], 'INVALID_ARGUMENT'],
  ] as const) {
    const r = await startCli(['cluster', args[0], '--config', file, ...args.slice(1)]).done;
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`^shardflake: error \\[${code}\\]: [^\\n]+\\n$`));
  }
  await untouched(config);
});

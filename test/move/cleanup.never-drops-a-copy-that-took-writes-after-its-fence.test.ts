import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { verifyCluster } from '../../packages/shardflake/src/admin/verify.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { FENCE_FUNCTION, unfenceSql } from '../../packages/shardflake/src/fence/fence.js';
import { cleanupCluster } from '../../packages/shardflake/src/move/cleanup.js';
import { leftoversCheck } from '../../packages/shardflake/src/move/leftovers-check.js';
import { isInterrupted, moveShard, moveShards } from '../../packages/shardflake/src/move/move.js';
import { useServers } from '../support/postgres.js';
import { countRows, makeCluster, placement, schemaOn, sleep, withClient } from './fixture.js';

/**
 * Issue 21, item 2: the fault the failover test found, reproduced without the failover. Two shards move a → b.
 * Then one old copy on a is made writable again (its fence dropped, as on a promoted replica that never replayed
 * it) and takes an acknowledged insert. `cluster cleanup` used to drop it with "dropped leftover copy"; now it
 * fences it on discovery, compares it with the state the move verified, keeps it and names the row to reconcile,
 * while the untouched old copy of the other shard is dropped as before. `cluster verify` reports it (item 2).
 */
test('status names an abandoned move and every leftover copy (fenced or not); cleanup fences a writable leftover copy, keeps one that took writes after its fence and names the rows to reconcile, and drops the one that still matches its move', async () => {
  const servers = await useServers(2);
  const config = await makeCluster(servers, 4);
  const [a, b] = [config.servers.a as string, config.servers.b as string];
  const [touched, clean] = [0, 1];
  for (const shard of [touched, clean]) {
    assert.equal((await placement(config, shard)).server, 'a');
    await withClient(a, (c) =>
      c.query(
        `INSERT INTO "${shardSchema(config, shard)}".items (note, n) SELECT 'r', g FROM generate_series(1, 300) g`,
      ),
    );
  }
  await moveShards(config, [touched, clean], 'b');

  const schema = shardSchema(config, touched);
  const lateId = await withClient(a, async (c) => {
    // As a promoted replica that never replayed the fence (nor its guard) holds it: no guard, no fence.
    await c.query('DROP EVENT TRIGGER IF EXISTS shardflake_fence_guard_end');
    await c.query('DROP EVENT TRIGGER IF EXISTS shardflake_fence_guard_drop');
    await c.query(unfenceSql(schema));
    const { rows } = await c.query(
      `INSERT INTO "${schema}".items (note) VALUES ('acknowledged on the old copy') RETURNING id`,
    );
    return String((rows[0] as { id: bigint }).id);
  });

  // Status tells the truth first: a move abandoned after its fence, and both leftovers, one of them writable.
  await assert.rejects(moveShard(config, 2, 'a', { stopAfter: 'fenced' }), (e) => isInterrupted(e));
  let status = await clusterStatus(config);
  for (let i = 0; i < 50 && !status.moves.unfinished[0]?.abandoned; i++) {
    await sleep(100);
    status = await clusterStatus(config);
  }
  assert.deepEqual(
    status.moves.unfinished.map((m) => [m.shard, m.phase, m.abandoned]),
    [[2, 'fenced', true]],
  );
  assert.deepEqual(
    status.moves.leftovers.map((l) => [l.shard, l.server, l.role, l.fenced]),
    [
      [touched, 'a', 'primary', false],
      [clean, 'a', 'primary', true],
    ],
  );
  assert.ok(
    status.warnings.some((w) =>
      /move #\d+ of shard 2 .*abandoned in phase fenced: the shard refuses writes/.test(w),
    ),
    status.warnings.join('\n'),
  );
  assert.ok(
    status.warnings.some((w) =>
      new RegExp(`leftover copy ${schema} of shard ${touched} .* is NOT fenced`).test(w),
    ),
    status.warnings.join('\n'),
  );

  // cluster verify names the copy as a problem twice over: not fenced, and changed since its move verified it.
  const verifyLeftovers = async () =>
    (await verifyCluster(config, { checks: [leftoversCheck] })).problems.map((p) => `${p.where}: ${p.what}`);
  const before = await verifyLeftovers();
  assert.equal(before.length, 2, before.join('\n'));
  assert.match(
    before[0] ?? '',
    new RegExp(`^shard ${touched} \\(${schema}\\) on server a: a leftover copy that is NOT fenced`),
  );
  assert.match(
    before[1] ?? '',
    new RegExp(
      `changed after move #\\d+ fenced it \\(items: 301 rows, 300 when the move verified it\\); reconcile items.id=${lateId} with server b`,
    ),
  );

  const result = await cleanupCluster(config);
  assert.deepEqual(
    result.settled.map((m) => [m.shard, m.outcome]),
    [[2, 'rolled_back']],
  );
  assert.deepEqual(
    result.fencedOnDiscovery.map((c) => [c.server, c.shard]),
    [['a', touched]],
    'the writable leftover was fenced at once',
  );
  assert.deepEqual(
    result.conflicts.map((c) => [c.server, c.shard, c.differences]),
    [['a', touched, ['items: 301 rows, 300 when the move verified it']]],
  );
  assert.deepEqual(result.conflicts[0]?.rowsToReconcile, [`items.id=${lateId}`]);
  assert.deepEqual(
    result.droppedCopies.map((c) => [c.server, c.shard]),
    [['a', clean]],
  );
  // The acknowledged row is still there, on a copy that now refuses writes; the home copy is untouched.
  assert.equal(await schemaOn(a, schema), true);
  assert.equal(await countRows(a, schema), 301);
  await withClient(a, async (c) => {
    await assert.rejects(
      c.query(`INSERT INTO "${schema}".items (note) VALUES ('x')`),
      (e: { code?: string }) => e.code === 'SF001',
    );
    const fenced = await c.query(
      'SELECT 1 FROM pg_proc WHERE proname = $1 AND pronamespace = $2::regnamespace',
      [FENCE_FUNCTION, schema],
    );
    assert.equal(fenced.rowCount, 1);
  });
  assert.equal(await countRows(b, schema), 300);
  assert.equal(await schemaOn(a, shardSchema(config, clean)), false);

  const after = await clusterStatus(config);
  assert.deepEqual(
    after.moves.leftovers.map((l) => [l.shard, l.fenced]),
    [[touched, true]],
    'the kept copy is listed, fenced',
  );
  // cluster verify reports the conflict cleanup kept, with the row to reconcile, and nothing else.
  const kept = await verifyLeftovers();
  assert.equal(kept.length, 1, kept.join('\n'));
  assert.match(kept[0] ?? '', new RegExp(`reconcile items.id=${lateId} with server b, then drop it by hand`));
  // A second run changes nothing: the conflict stays reported until someone reconciles it.
  const again = await cleanupCluster(config);
  assert.deepEqual(again.fencedOnDiscovery, []);
  assert.deepEqual(
    again.conflicts.map((c) => c.shard),
    [touched],
  );
  assert.deepEqual(again.droppedCopies, []);
});

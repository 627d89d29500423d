import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';
import { makeCluster, placement, rawConfig, replicationLeftovers, schemaOn, withClient } from './fixture.js';

test('CLI: a move SIGKILLed while the source is locked releases the writes and finishes on rerun; rebalance spreads shards over an added server; cleanup drops the old copies', async () => {
  const servers = await useServers(3);
  const [a, b, c] = servers as [(typeof servers)[0], (typeof servers)[0], (typeof servers)[0]];
  const config = await makeCluster([a, b], 6);
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-move-'));
  const twoServers = join(dir, 'two.json');
  const threeServers = join(dir, 'three.json');
  await writeFile(twoServers, JSON.stringify(rawConfig([a, b], 6)));
  await writeFile(threeServers, JSON.stringify(rawConfig([a, b, c], 6)));
  const schema = shardSchema(config, 1);

  // Bad input: one line on stderr, exit code 2, nothing moved.
  for (const [args, codeName] of [
    [['--shard', 'x', '--to', 'b'], 'INVALID_ARGUMENT'],
    [['--shard', '1', '--to', 'zz'], 'UNKNOWN_SERVER'],
    [['--shard', '1', '--to', 'a'], 'INVALID_ARGUMENT'],
    [['--shard', '4000', '--to', 'b'], 'UNKNOWN_SHARD'],
  ] as const) {
    const r = await startCli(['cluster', 'move', '--config', twoServers, ...args]).done;
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, new RegExp(`^shardflake: error \\[${codeName}\\]: [^\\n]+\\n$`));
    assertNoPassword(r.stderr, [a.url, b.url], 'stderr');
  }

  // Kill -9 while the cutover holds the source's locks.
  const held = startCli(['cluster', 'move', '--config', twoServers, '--shard', '1', '--to', 'b'], {
    SHARDFLAKE_MOVE_HOLD_AFTER: 'cutover-locked',
  });
  await held.waitFor('stderr', /holding after cutover-locked/);
  await withClient(a.url, async (client) => {
    await client.query("SET statement_timeout = '300ms'");
    await assert.rejects(
      client.query(`INSERT INTO "${schema}".items (note) VALUES ('paused')`),
      (e: { code?: string }) => e.code === '57014',
    );
  });
  held.child.kill('SIGKILL');
  await held.done;
  // The crashed session's lock went with it: the source takes writes again and is still the shard's home.
  await withClient(a.url, (client) =>
    client.query(`INSERT INTO "${schema}".items (note) VALUES ('after kill')`),
  );
  assert.deepEqual(await placement(config, 1), { server: 'a', state: 'moving' });

  const moveAgain = () =>
    startCli(['cluster', 'move', '--config', twoServers, '--shard', '1', '--to', 'b', '--json']).done;
  let rerun = await moveAgain();
  for (let i = 0; rerun.code !== 0 && rerun.stderr.includes('SHARD_BUSY') && i < 40; i++) {
    await new Promise((r) => setTimeout(r, 100));
    rerun = await moveAgain();
  }
  assert.equal(rerun.code, 0, rerun.stderr);
  const moved = JSON.parse(rerun.stdout) as { moves: { resumedFrom: string; to: string; rows: string }[] };
  assert.equal(moved.moves[0]?.resumedFrom, 'synced');
  assert.equal(moved.moves[0]?.rows, '2', 'the row written after the kill and the migrations row');
  assert.deepEqual(await placement(config, 1), { server: 'b', state: 'active' });

  // A third server joins: the plan moves two of b's four shards to c.
  const plan = await startCli(['cluster', 'rebalance', '--config', threeServers, '--dry-run', '--json']).done;
  assert.equal(plan.code, 0, plan.stderr);
  const planned = JSON.parse(plan.stdout) as {
    before: Record<string, number>;
    moves: { from: string; to: string }[];
  };
  assert.deepEqual(planned.before, { a: 2, b: 4, c: 0 });
  assert.deepEqual(
    planned.moves.map((m) => `${m.from}>${m.to}`),
    ['b>c', 'b>c'],
  );
  const run = await startCli(['cluster', 'rebalance', '--config', threeServers, '--json']).done;
  assert.equal(run.code, 0, run.stderr);
  assert.deepEqual((JSON.parse(run.stdout) as { after: Record<string, number> }).after, { a: 2, b: 2, c: 2 });

  // Balancing by rows instead: shard 1 holds the only rows, so no move narrows the gap; the plan says so.
  const byRows = await startCli([
    'cluster',
    'rebalance',
    '--config',
    threeServers,
    '--by',
    'rows',
    '--dry-run',
    '--json',
  ]).done;
  assert.equal(byRows.code, 0, byRows.stderr);
  const rowsPlan = JSON.parse(byRows.stdout) as {
    by: string;
    rowsBefore: Record<string, number>;
    moves: unknown[];
  };
  assert.equal(rowsPlan.by, 'rows');
  assert.deepEqual(Object.keys(rowsPlan.rowsBefore), ['a', 'b', 'c']);

  // Cleanup drops the three fenced old copies and leaves no replication object anywhere.
  const cleaned = await startCli(['cluster', 'cleanup', '--config', threeServers, '--json']).done;
  assert.equal(cleaned.code, 0, cleaned.stderr);
  assert.equal((JSON.parse(cleaned.stdout) as { droppedCopies: unknown[] }).droppedCopies.length, 3);
  assert.equal(await schemaOn(a.url, schema), false);
  for (const s of servers) assert.deepEqual(await replicationLeftovers(s.url), []);
  const again = await startCli(['cluster', 'cleanup', '--config', threeServers]).done;
  assert.equal(again.stdout, 'nothing to clean up\n');
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { faultsFound, runFaultsBench } from '../../packages/cli/src/bench/faults.js';
import type { TransferCluster } from '../../packages/cli/src/bench/transfers.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { connectServer } from '../../packages/shardflake/src/topology/connections.js';

/**
 * The contended-transfers scenario of bench faults counts what it claims to. A short run (deadlocks across the
 * two servers form and are broken while it runs) is damaged before the count, each damage made to show in one
 * column only: an acknowledged transfer removed from both ledgers (its accounts put back) is lost; one removed
 * from one ledger (its account put back) is half-applied; a ledger row of another written twice with delta 0 is
 * duplicated; an account's balance changed by 1 is diverged. The result must be exactly those, and a failed run.
 */
async function onShard(
  cluster: TransferCluster,
  shard: number,
  sql: (table: (t: string) => string) => string,
  values: unknown[],
) {
  const catalog = await connectServer(cluster.config, cluster.config.catalog);
  const home = await readShardMap(catalog)
    .then((m) => m.shards.find((s) => s.shard === shard))
    .finally(() => catalog.end());
  assert.ok(home);
  const client = await connectServer(cluster.config, home.server);
  try {
    return (
      await client.query(
        sql((t) => qualified(home.schema, t)),
        values,
      )
    ).rows;
  } finally {
    await client.end();
  }
}

test('contended-transfers: a transfer in neither ledger is lost, in one is half-applied, twice in one is duplicated, a balance off its ledger is diverged; nothing hung', async () => {
  const result = await runFaultsBench({
    scenarios: ['contended-transfers'],
    contended: {
      seconds: 4,
      async beforeCount(cluster, calls) {
        const committed = calls.filter((c) => c.outcome === 'committed');
        assert.ok(committed.length >= 3, `acknowledged ${committed.length}`);
        const [lost, half, twice] = committed as [(typeof calls)[0], (typeof calls)[0], (typeof calls)[0]];
        // Take a transfer out of a ledger, and its amount back out of the account, so only the ledger shows it.
        const unapply = (shard: number, id: bigint) =>
          onShard(
            cluster,
            shard,
            (t) =>
              `WITH gone AS (DELETE FROM ${t('ledger')} WHERE transfer_id = $1 RETURNING account, delta)
               UPDATE ${t('accounts')} a SET balance = a.balance - gone.delta FROM gone WHERE a.id = gone.account`,
            [id],
          );
        await unapply(0, lost.id);
        await unapply(1, lost.id);
        await unapply(1, half.id);
        await onShard(
          cluster,
          0,
          (t) =>
            `INSERT INTO ${t('ledger')} (transfer_id, account, delta) SELECT transfer_id, account, 0 FROM ${t('ledger')} WHERE transfer_id = $1`,
          [twice.id],
        );
        await onShard(
          cluster,
          1,
          (t) => `UPDATE ${t('accounts')} SET balance = balance + 1 WHERE id = 0`,
          [],
        );
      },
    },
  });
  const [s] = result.scenarios;
  assert.ok(s);
  assert.equal(s.name, 'contended-transfers');
  assert.deepEqual(
    {
      lost: s.lost,
      halfApplied: s.halfApplied,
      duplicated: s.duplicated,
      diverged: s.diverged,
      hung: s.hung,
    },
    { lost: 1, halfApplied: 1, duplicated: 1, diverged: 1, hung: 0 },
    s.lostExamples.join('\n'),
  );
  assert.ok(s.acknowledged > 10, `acknowledged ${s.acknowledged}`);
  assert.equal(result.faultsFound, true);
  assert.equal(faultsFound([{ ...s, lost: 0, halfApplied: 0, duplicated: 0, diverged: 0 }]), false);
  assert.match(s.notes.join(' '), /deadlock victims; longest call \d+ ms/);
});

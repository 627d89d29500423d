import assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import type { FailoverEvent } from '../../packages/shardflake/src/telemetry/events.js';
import { createServerNodes } from '../../packages/shardflake/src/topology/server-nodes.js';
import { useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';
import { assertNoPassword } from '../support/secrets.js';

/**
 * The HA tool's failover, by hand: a writer loops on the server's nodes (acquire for write, one INSERT, release),
 * the primary is stopped (fast shutdown, as Patroni or `pg_ctl stop -m fast` would), and a moment later the replica
 * is promoted. Nothing tells the ServerNodes: it must find the new primary from the errors alone, within 10 s of
 * the promotion, and every INSERT it acknowledged before the stop must be on the new primary. A fast shutdown
 * sends all WAL to connected replicas before the primary exits, so with streaming replication no acknowledged
 * write is lost here (after a crash, only synchronous replication promises that; that is the HA tool's choice).
 */
// At the top level, like useServers: their after() hooks belong to the file, not to a test.
const [primary] = (await useServers(1)) as [EmbeddedServer];
const replica = await startReplica(primary);

test('writes reach the promoted replica within 10 s, and every acknowledged write is there', async () => {
  const setup = new pg.Client(primary.url);
  await setup.connect();
  await setup.query('CREATE TABLE t (id int PRIMARY KEY)');
  await setup.end();
  await caughtUp(primary, replica);

  const events: FailoverEvent[] = [];
  const nodes = createServerNodes('a', [primary.url, replica.url], {
    poolSize: 2,
    rediscoverMs: 50,
    failoverWaitMs: 20_000,
    onEvent: (e) => events.push(e),
  });
  const acknowledged: number[] = [];
  const failed: unknown[] = [];
  let promotedAt = 0;
  let firstAfterPromotion = 0;
  let stop = false;
  const writer = (async () => {
    for (let id = 1; !stop; id++) {
      let lease: Awaited<ReturnType<typeof nodes.acquire>>;
      try {
        lease = await nodes.acquire({ intent: 'write' });
      } catch (error) {
        failed.push(error);
        continue;
      }
      try {
        await lease.client.query('INSERT INTO t VALUES ($1)', [id]);
        lease.release();
        acknowledged.push(id);
        if (promotedAt && !firstAfterPromotion) firstAfterPromotion = performance.now();
      } catch (error) {
        lease.release(error);
        // the INSERT was in flight on the node that went away: its outcome is unknown, and the node is suspect
        assert.equal(nodes.noteError(lease.node, error), true, String(error));
        failed.push(error);
      }
    }
  })();

  // bounded: a writer that failed early must fail the test, not leave it waiting
  const warmUntil = performance.now() + 20_000;
  while (acknowledged.length < 50 && performance.now() < warmUntil)
    await new Promise((r) => setTimeout(r, 10));
  assert.ok(
    acknowledged.length >= 50,
    `the writer stalled before the failover: ${failed.length} errors, last ${String(failed.at(-1))}`,
  );
  await primary.stop();
  const beforeStop = [...acknowledged];
  await new Promise((r) => setTimeout(r, 300)); // the HA tool takes a moment to decide
  await replica.promote();
  promotedAt = performance.now();
  while (!firstAfterPromotion && performance.now() - promotedAt < 10_000)
    await new Promise((r) => setTimeout(r, 20));
  const more = acknowledged.length;
  while (acknowledged.length < more + 20 && performance.now() - promotedAt < 10_000)
    await new Promise((r) => setTimeout(r, 10));
  stop = true;
  await writer;
  await nodes.end();

  assert.ok(firstAfterPromotion > 0, 'no write succeeded within 10 s of the promotion');
  assert.ok(firstAfterPromotion - promotedAt < 10_000);
  const check = new pg.Client(replica.url);
  await check.connect();
  const rows = (await check.query('SELECT id FROM t')).rows.map((r) => r.id as number);
  await check.end();
  const present = new Set(rows);
  assert.deepEqual(
    beforeStop.filter((id) => !present.has(id)),
    [],
    'acknowledged writes missing after the failover',
  );
  assert.deepEqual(
    acknowledged.filter((id) => !present.has(id)),
    [],
  );
  // errors during the failover, if any, are node failures (never a silent success)
  for (const e of failed) assert.ok(isShardflakeError(e) || e instanceof Error);
  assert.ok(
    events.some((e) => e.type === 'node-suspect' && e.node.includes(`:${new URL(primary.url).port}/`)),
  );
  const found = events.filter((e) => e.type === 'roles-found').at(-1);
  assert.equal(found?.primary?.includes(`:${replica.port}/`), true, JSON.stringify(found));
  assertNoPassword(
    JSON.stringify(events.map((e) => [e.node, e.primary, e.error?.message])),
    [primary.url, replica.url],
    'the failover events',
  );
});

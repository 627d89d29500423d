import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { createRouter, type Router, type RouterEvent } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { entryTable } from '../../packages/shardflake/src/lookups/ddl.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { useServers } from '../support/postgres.js';
import { usersWithEmailLookup } from './cluster-config.js';

/**
 * `router.update` of a looked-up column is one statement the router wrote, in a transaction that also writes the
 * entries; when that transaction is a deadlock's victim nothing of it committed, so the router runs it again
 * (SINGLE_WRITE_RETRY) instead of failing the call. The deadlock, provoked step by step on one server:
 *   1. another session T locks the value's old entry (FOR UPDATE);
 *   2. the update runs: it locks its row, then its entry delete waits for T;
 *   3. once the update waits, T updates the same row (a column without a lookup): T waits for the update;
 *   4. PostgreSQL's deadlock check runs first in the session that waited first, the update's: it fails with
 *      40P01 and rolls back, T goes on and commits;
 *   5. the update runs again and commits: the call resolves, with one retry event (reason deadlock).
 */
const servers = await useServers(1);
const config = usersWithEmailLookup(servers);
const url = servers[0]?.url as string;
let router: Router;
const events: RouterEvent[] = [];
let other: pg.Client;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false }, onEvent: (e) => events.push(e) });
  other = new pg.Client({ connectionString: url });
  // The servers stop before this file's own after hook runs: the connection's end is then no error.
  other.on('error', () => {});
  await other.connect();
});
after(async () => {
  await other?.end();
  await router?.close();
});

async function waitingOnALock(except: number): Promise<boolean> {
  const { rows } = await other.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> $1`,
    [except],
  );
  return (rows[0] as { n: number }).n > 0;
}

test('an update chosen as the victim of a deadlock runs again and commits; the other transaction commits too', async () => {
  const id = await router.insert(
    'users',
    { name: 'ann', email: 'old@victim.test' },
    { lookup: 'user_email' },
  );
  const entries = qualified(
    router.placement(shardForKey('old@victim.test', 4)).schema,
    entryTable('user_email'),
  );
  const users = qualified(router.placement(router.shardOfId(id)).schema, 'users');
  const ourPid = (await other.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
  events.length = 0;
  await other.query('BEGIN');
  await other.query(`SELECT 1 FROM ${entries} WHERE value = 'old@victim.test' FOR UPDATE`);
  const update = router.update('users', id, { email: 'new@victim.test' }).then(
    () => 'committed',
    (e: { code?: string }) => `failed with ${e.code}`,
  );
  const started = performance.now();
  while (!(await waitingOnALock(ourPid))) {
    assert.ok(performance.now() - started < 10_000, 'the update never waited for the entry');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await other.query(`UPDATE ${users} SET name = 'changed by the other' WHERE id = $1`, [id]);
  await other.query('COMMIT');
  assert.equal(await update, 'committed');
  const retries = events.filter((e) => e.type === 'retry');
  assert.equal(retries.length, 1, JSON.stringify(retries));
  assert.equal((retries[0] as { reason?: string }).reason, 'deadlock');
  const row = await router.get<{ name: string; email: string }>('users', id);
  assert.deepEqual([row?.name, row?.email], ['changed by the other', 'new@victim.test']);
  assert.equal((await router.lookup('user_email', 'new@victim.test'))?.id, id);
  assert.equal(await router.lookup('user_email', 'old@victim.test'), null);
});

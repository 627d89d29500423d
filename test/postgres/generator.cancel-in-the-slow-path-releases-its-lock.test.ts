import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, installGenerator } from 'shardflake';
import { useServers } from '../support/postgres.js';
import { setTestClock } from './generator-fixture.js';

/*
 * The slow path holds a session-level advisory lock (never until commit). A lock a cancelled call kept would stay
 * with its session until it disconnects, and every other session's next new era on that shard would wait for it.
 * The race: session A holds the lock inside the slow path (held open by the test pause), session B waits for it;
 * both are cancelled. B's cancel comes while it waits, so B must not try to release a lock it never got (that would
 * print PostgreSQL's "you don't own a lock" warning); A's comes while it holds it, so A must release it although its
 * session stays connected. Then a third session must start a new era at once (lock_timeout 2 s proves no stall).
 */
test('a cancel inside the slow path or while waiting for its lock leaves no lock behind and warns nothing', async () => {
  const [server] = await useServers(1);
  const url = (server as { url: string }).url;
  const [admin, a, b, c] = await Promise.all([connect(url), connect(url), connect(url), connect(url)]);
  try {
    const schema = 'cancel_test';
    await installGenerator(admin, { schema, shard: 7, testClock: true });
    await setTestClock(admin, schema, Date.UTC(2030, 0, 1));
    await admin.query(
      `CREATE OR REPLACE FUNCTION ${schema}.next_id_test_pause() RETURNS void LANGUAGE sql AS 'SELECT pg_sleep(30)'`,
    );
    const pidOf = async (client: typeof a) =>
      (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const [pidA, pidB] = [await pidOf(a), await pidOf(b)];
    const notices: string[] = [];
    b.on('notice', (n) => notices.push(n.message ?? ''));

    const aDone = a.query(`SELECT ${schema}.next_id()`).then(
      () => 'returned',
      (e: { code?: string }) => e.code,
    );
    const until = async (sql: string, params: unknown[]) => {
      for (let i = 0; i < 200 && !(await admin.query(sql, params)).rows[0].ok; i++) await sleep(50);
    };
    await until(
      `SELECT count(*) = 1 AS ok FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1`,
      [pidA],
    );
    const bDone = b.query(`SELECT ${schema}.next_id()`).then(
      () => 'returned',
      (e: { code?: string }) => e.code,
    );
    await until(
      `SELECT count(*) = 1 AS ok FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = $1`,
      [pidB],
    );

    await admin.query('SELECT pg_cancel_backend($1)', [pidB]);
    assert.equal(await bDone, '57014');
    await admin.query('SELECT pg_cancel_backend($1)', [pidA]);
    assert.equal(await aDone, '57014');
    assert.deepEqual(notices, [], 'the session cancelled while waiting warned about a lock it never got');
    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'`);
    assert.equal(rows[0].n, 0, 'a cancelled slow path kept its advisory lock');

    await admin.query(
      `CREATE OR REPLACE FUNCTION ${schema}.next_id_test_pause() RETURNS void LANGUAGE sql BEGIN ATOMIC END`,
    );
    await setTestClock(admin, schema, Date.UTC(2030, 0, 1) + 1);
    await c.query(`SET lock_timeout = '2s'`);
    const { rows: ids } = await c.query(`SELECT ${schema}.next_id() AS id`);
    assert.ok(BigInt(ids[0].id) > 0n);
  } finally {
    await Promise.all([admin, a, b, c].map((client) => client.end()));
  }
});

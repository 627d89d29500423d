import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { userIds } from '../../packages/embedded/src/folder-access.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { moveShard, moveShards } from '../../packages/shardflake/src/move/move.js';
import type { MoveStep } from '../../packages/shardflake/src/move/options.js';
import { subscriptionConninfo } from '../../packages/shardflake/src/move/replication.js';
import { makeCluster, replicationLeftovers, withClient } from '../move/fixture.js';
import { useServers } from '../support/postgres.js';

/**
 * A subscription's connection string is kept in pg_subscription.subconninfo, shown in pg_stat_activity while
 * CREATE SUBSCRIPTION runs, and logged under log_statement = ddl. Moves (both engines) with a dedicated
 * replication role whose secret is in a passfile on the target, and a move with the defaults (the URL's user, the
 * secret from the target server's environment), put no password in any of those, nor in what the move returns.
 */
test('no password in pg_subscription, pg_stat_activity, the server logs or a move result; the subscription logs in as the replication role', async () => {
  const log: string[] = [];
  const servers = await useServers(2, {
    settings: { log_statement: 'ddl' },
    onLog: (line) => log.push(line),
  });
  const config = await makeCluster(servers, 8);
  const [a, b] = servers as [(typeof servers)[0], (typeof servers)[0]];
  const replPassword = randomBytes(18).toString('base64url');
  const secrets = [replPassword, ...servers.map((s) => decodeURIComponent(new URL(s.url).password))];
  const leaks = (text: string) => secrets.filter((p) => text.includes(p)).length;

  // The replication role on the source: REPLICATION and nothing else (the move grants it SELECT on what it copies).
  // Its password is set with logging off, as an operator would (or with psql's \password).
  await withClient(a.url, async (c) => {
    await c.query("SET log_statement = 'none'");
    await c.query(`CREATE ROLE sf_repl LOGIN REPLICATION NOSUPERUSER PASSWORD '${replPassword}'`);
  });
  // Its secret, in a passfile on the target's host (readable by the server's OS user only).
  const dir = await mkdtemp(join(tmpdir(), 'sf-passfile-'));
  const passfile = join(dir, 'replication.pgpass');
  await writeFile(passfile, `127.0.0.1:${a.port}:*:sf_repl:${replPassword}\n`, { mode: 0o600 });
  if (process.getuid?.() === 0) {
    const ids = await userIds('postgres');
    if (ids) {
      await chown(dir, ids.uid, ids.groups[0] as number);
      await chown(passfile, ids.uid, ids.groups[0] as number);
    }
  }
  const onA = (await withClient(a.url, readShardMap)).shards
    .filter((s) => s.server === 'a')
    .map((s) => s.shard);
  const [single, inSet, byDefault] = onA as [number, number, number];

  const seen: { conninfo: string[]; activity: string[]; walsenders: string[] } = {
    conninfo: [],
    activity: [],
    walsenders: [],
  };
  const look = async (step: MoveStep) => {
    if (step !== 'subscribed' && step !== 'synced') return;
    await withClient(b.url, async (c) => {
      const subs = await c.query('SELECT subconninfo FROM pg_subscription');
      seen.conninfo.push(...subs.rows.map((r: { subconninfo: string }) => r.subconninfo));
    });
    for (const s of servers) {
      await withClient(s.url, async (c) => {
        const act = await c.query("SELECT coalesce(query, '') AS q FROM pg_stat_activity");
        seen.activity.push(...act.rows.map((r: { q: string }) => r.q));
      });
    }
    await withClient(a.url, async (c) => {
      const w = await c.query('SELECT usename::text AS u FROM pg_stat_replication');
      seen.walsenders.push(...w.rows.map((r: { u: string }) => r.u));
    });
  };
  const login = { user: 'sf_repl', passfile };
  const results = [
    await moveShard(config, single, 'b', { replication: login, afterStep: look }),
    ...(await moveShards(config, [inSet], 'b', { replication: login, afterStep: look })),
  ];
  assert.ok(seen.conninfo.length >= 2, 'the subscriptions were seen');
  for (const conninfo of seen.conninfo) {
    assert.equal(leaks(conninfo), 0, 'no password in pg_subscription.subconninfo');
    assert.match(conninfo, /user='sf_repl'/);
    assert.match(conninfo, /passfile='/);
    assert.doesNotMatch(conninfo, /password/);
  }
  assert.ok(seen.walsenders.includes('sf_repl'), 'the source streams to the replication role');

  // The defaults: the URL's user, its secret from the target server's own environment (embedded servers set
  // PGPASSFILE), still no password in the subscription.
  seen.conninfo = [];
  results.push(await moveShard(config, byDefault, 'b', { afterStep: look }));
  assert.ok(seen.conninfo.length > 0);
  for (const conninfo of seen.conninfo) {
    assert.equal(leaks(conninfo), 0);
    assert.doesNotMatch(conninfo, /password/);
  }

  // A target that has no secret for the role: the move stops, rolled back, and says where the secret belongs.
  await withClient(a.url, async (c) => {
    await c.query("SET log_statement = 'none'");
    await c.query(`CREATE ROLE sf_nopass LOGIN REPLICATION PASSWORD '${replPassword}x'`);
  });
  const fourth = onA[3] as number;
  const failure = await moveShard(config, fourth, 'b', { replication: { user: 'sf_nopass' } }).then(
    () => assert.fail('the move cannot log in'),
    (e: Error) => e.message,
  );
  assert.match(failure, /could not log in to the source as role sf_nopass: subscriptions carry no password/);
  assert.equal(leaks(failure), 0);

  assert.equal(leaks(seen.activity.join('\n')), 0, 'no password in pg_stat_activity');
  const logText = log.join('');
  assert.match(logText, /CREATE SUBSCRIPTION/, 'log_statement = ddl logged the subscriptions');
  assert.equal(leaks(logText), 0, 'no password in the server logs');
  assert.equal(leaks(JSON.stringify(results, (_k, v) => (typeof v === 'bigint' ? String(v) : v))), 0);
  assert.deepEqual(await replicationLeftovers(a.url), []);
  assert.deepEqual(await replicationLeftovers(b.url), []);
  await rm(dir, { recursive: true, force: true });
});

test('the connection string keeps host, port, database and options, drops every secret keyword, and quotes values', () => {
  assert.equal(
    subscriptionConninfo(
      "postgres://app:s3cret@db.internal:6432/my%20db?sslmode=require&password=x&passfile=/p&application_name=o'k",
      {
        user: 'sf_repl',
        passfile: '/etc/shardflake/pgpass',
      },
    ),
    "host='db.internal' port='6432' dbname='my db' user='sf_repl' sslmode='require' application_name='o\\'k' passfile='/etc/shardflake/pgpass'",
  );
  assert.equal(subscriptionConninfo('postgresql://u:p@[::1]/'), "host='::1' dbname='u' user='u'");
});

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { clusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { checkPrivileges } from '../../packages/shardflake/src/fence/privileges.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { rawConfig, replicationLeftovers, withClient } from '../move/fixture.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';

function as(url: string, user: string, password: string): string {
  const u = new URL(url);
  u.username = user;
  u.password = password;
  return u.toString();
}

const lacks = (pattern: RegExp) => (e: unknown) =>
  isShardflakeError(e, 'INSUFFICIENT_PRIVILEGE') && pattern.test(e.message) && !e.message.includes('\n');

/**
 * A cluster run by an ordinary role (CREATE on the database, nothing more): init, migrate, status and the router
 * work without a superuser; move, rebalance and cleanup are refused before anything starts, in one line that names
 * the server, the role and what it lacks. The DDL guard's switch works only for the role that installed the guard,
 * and a `shardflake_move` schema someone else planted is refused, not adopted.
 */
test('an ordinary role runs init, migrate, status and the router; moves say in one line that they need a superuser; the guard switch and its schema are the installer’s only', async () => {
  const servers = await useServers(2);
  const superConfig = validateConfig(rawConfig(servers, 4), 'super');
  const password = randomBytes(18).toString('base64url');
  for (const s of servers) {
    await withClient(s.url, async (c) => {
      await c.query(`CREATE ROLE sf_owner LOGIN NOSUPERUSER PASSWORD '${password}'`);
      await c.query(`CREATE ROLE stranger LOGIN NOSUPERUSER PASSWORD '${password}'`);
      await c.query('GRANT CREATE ON DATABASE postgres TO sf_owner');
    });
  }
  const ownerRaw = {
    ...rawConfig(servers, 4),
    servers: Object.fromEntries(servers.map((s) => [s.name, as(s.url, 'sf_owner', password)])),
  };
  const owner = validateConfig(ownerRaw, 'owner');
  const stranger = validateConfig(
    {
      ...ownerRaw,
      servers: Object.fromEntries(servers.map((s) => [s.name, as(s.url, 'stranger', password)])),
    },
    'stranger',
  );

  // Before init: a stranger without CREATE is told so; the owner may init.
  await assert.rejects(
    checkPrivileges(stranger, 'init'),
    lacks(/on server a role stranger lacks CREATE on the database/),
  );
  await checkPrivileges(owner, 'init');
  await initCluster(owner);
  for (const command of ['migrate', 'status', 'dashboard', 'router'] as const)
    await checkPrivileges(owner, command);
  await migrateCluster(owner);
  assert.ok((await clusterStatus(owner)).servers.length === 2);
  const router = await createRouter(owner);
  try {
    const id = await router.insert('items', { note: 'written without a superuser' }, { shard: 1 });
    assert.equal((await router.get('items', id))?.note, 'written without a superuser');
  } finally {
    await router.close();
  }

  // What an ordinary role may not do, each refused in one line naming what is missing.
  for (const command of ['move', 'rebalance', 'cleanup'] as const) {
    await assert.rejects(
      checkPrivileges(owner, command),
      lacks(/on server a role sf_owner lacks superuser \(event triggers/),
    );
  }
  await assert.rejects(
    checkPrivileges(stranger, 'status'),
    lacks(/role stranger lacks USAGE on schema shardflake/),
  );
  await assert.rejects(checkPrivileges(stranger, 'router'), lacks(/USAGE on 2 shard schema\(s\)/));
  // The router checks the same at its start, so its first query never fails half-way on a missing right.
  await assert.rejects(createRouter(stranger), lacks(/role stranger lacks USAGE on schema shardflake/));
  await assert.rejects(checkPrivileges(stranger, 'migrate'), lacks(/ownership of 2 shard schema\(s\)/));

  // The CLI: one stderr line, exit 2, nothing started, no password.
  const file = join(tmpdir(), `sf-priv-${process.pid}.json`);
  await writeFile(file, JSON.stringify(ownerRaw));
  const cli = await startCli(['cluster', 'move', '--config', file, '--shard', '0', '--to', 'b']).done;
  assert.equal(cli.code, 2);
  assert.equal(cli.stderr.trim().split('\n').length, 1, cli.stderr);
  assert.match(
    cli.stderr,
    /error \[INSUFFICIENT_PRIVILEGE\]: cluster move cannot run: on server a role sf_owner lacks superuser/,
  );
  assertNoPassword(cli.stderr + cli.stdout, [ownerRaw.servers.a as string, ...servers.map((s) => s.url)]);
  const catalogUrl = servers[0]?.url as string;
  assert.equal(
    await withClient(
      catalogUrl,
      async (c) => (await c.query("SELECT to_regclass('shardflake.moves') AS t")).rows[0].t,
    ),
    null,
    'no move was recorded',
  );
  // The library, called past the CLI's check, refuses at the DDL guard instead of moving without it.
  await assert.rejects(
    moveShard(owner, 0, 'b'),
    (e) => isShardflakeError(e) && /DDL guard of a move needs a superuser/.test(e.message),
  );
  assert.deepEqual(await replicationLeftovers(catalogUrl), []);

  // A shardflake_move schema another role made (it could hold a trigger that runs as the superuser): refused.
  const map = await withClient(catalogUrl, readShardMap);
  const onA = map.shards.filter((s) => s.server === 'a').map((s) => s.shard);
  await withClient(catalogUrl, (c) => c.query('CREATE SCHEMA shardflake_move AUTHORIZATION sf_owner'));
  await assert.rejects(
    moveShard(superConfig, onA[0] as number, 'b'),
    (e) =>
      isShardflakeError(e) && /schema shardflake_move exists and belongs to role sf_owner/.test(e.message),
  );
  await withClient(catalogUrl, (c) => c.query('DROP SCHEMA shardflake_move CASCADE'));

  // While a move runs, the shard's owner cannot switch the guard off with the setting; the move itself can.
  const schema = shardSchema(owner, onA[0] as number);
  let release = () => {};
  const held = new Promise<void>((r) => {
    release = r;
  });
  let reached = () => {};
  const atPrepared = new Promise<void>((r) => {
    reached = r;
  });
  const move = moveShard(superConfig, onA[0] as number, 'b', {
    afterStep: async (step) => {
      if (step === 'prepared') {
        reached();
        await held;
      }
    },
  });
  await atPrepared;
  const ownerUrl = ownerRaw.servers.a as string;
  const ddl = await withClient(ownerUrl, async (c) => {
    await c.query('BEGIN');
    await c.query(`SET LOCAL shardflake.move_ddl = 'on'`);
    const r = await c.query(`ALTER TABLE "${schema}".items ADD COLUMN planted int`).then(
      () => 'ok',
      (e: { code?: string }) => e.code,
    );
    await c.query('ROLLBACK');
    return r;
  });
  assert.equal(ddl, '55006', 'the setting does not open the guard for another role');
  release();
  await move;
  assert.deepEqual(await replicationLeftovers(catalogUrl), []);
});

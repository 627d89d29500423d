import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { useServers } from '../support/postgres.js';
import { makeCluster, rawConfig, sleep, withClient } from './fixture.js';

/**
 * Issue 21, item 3: a router started with a config of servers a and b keeps writing while a shard moves to a new
 * server c (the mover's config lists it). The catalog records the servers' addresses, never their passwords; the
 * router learns c's address with the map and connects with the password its environment gives (PGPASSWORD, as
 * libpq). Before, every write to the moved shard failed with UNKNOWN_SERVER until a restart.
 */
const servers = await useServers(3);
const old = await makeCluster(servers.slice(0, 2), 4);
const withC = validateConfig(rawConfig(servers, 4), 'config with server c');
const c = servers[2] as (typeof servers)[0];

test('a router on the old config writes through a move to a server it has never heard of: no error, every acknowledged row on the new server, no password in the catalog', async () => {
  process.env.PGPASSWORD = decodeURIComponent(new URL(c.url).password);
  const router = await createRouter(old);
  const shard = 0;
  const acked: bigint[] = [];
  const errors: unknown[] = [];
  let stop = false;
  const writer = (async () => {
    while (!stop) {
      try {
        acked.push(await router.insert('items', { note: 'old config' }, { shard }));
      } catch (error) {
        errors.push(error);
        await sleep(50);
      }
    }
  })();
  try {
    await sleep(200);
    await moveShard(withC, shard, 'c');
    const atSwitch = acked.length;
    for (let i = 0; i < 100 && acked.length < atSwitch + 20; i++) await sleep(20);
    stop = true;
    await writer;
    assert.deepEqual(
      errors.map((e) => (e as Error).message),
      [],
    );
    assert.ok(acked.length > atSwitch, 'the router kept writing after the switch');
    assert.equal(router.placement(shard).server, 'c');
    const onC = await withClient(c.url, async (client) => {
      const { rows } = await client.query(`SELECT id FROM "${shardSchema(old, shard)}".items`);
      return new Set(rows.map((r: { id: bigint }) => r.id));
    });
    for (const id of acked) assert.ok(onC.has(id), `acknowledged row ${id} is on c`);
    const recorded = await withClient(
      old.servers.a as string,
      async (client) =>
        (
          await client.query(
            "SELECT name, array_to_string(nodes, ' ') AS nodes FROM shardflake.servers ORDER BY name",
          )
        ).rows,
    );
    assert.deepEqual(
      recorded.map((r: { name: string }) => r.name),
      ['a', 'b', 'c'],
    );
    for (const s of servers) {
      const password = decodeURIComponent(new URL(s.url).password);
      for (const r of recorded) assert.ok(!String(r.nodes).includes(password), 'no password in the catalog');
    }
  } finally {
    stop = true;
    await writer;
    await router.close();
    delete process.env.PGPASSWORD;
  }
});

test('a router on the old config that cannot log in to the server it learned from the catalog fails with one AUTH_FAILED line naming the server, the role and where the password belongs, without a password', async () => {
  // Shard 0 lives on c since the test above. No password for c in the environment, then a wrong one.
  const password = decodeURIComponent(new URL(c.url).password);
  for (const given of [undefined, 'not-the-password']) {
    if (given === undefined) delete process.env.PGPASSWORD;
    else process.env.PGPASSWORD = given;
    const router = await createRouter(old);
    try {
      await assert.rejects(router.insert('items', { note: 'no way in' }, { shard: 0 }), (e: unknown) => {
        assert.ok(isShardflakeError(e, 'AUTH_FAILED'), String(e));
        assert.equal(e.message.split('\n').length, 1);
        assert.match(
          e.message,
          /^server c \(postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres\) refused the login of role postgres \((no password given|password authentication failed)\); this router learned server c from the catalog, which keeps no passwords: add server c to the router's config with its password as \$\{VAR\}, or give the password in PGPASSWORD or the pgpass file \(docs\/security\.md\)$/,
        );
        assert.ok(!/SASL|SCRAM-SERVER/.test(e.message), 'no SCRAM text');
        assert.ok(!e.message.includes(password), 'no password in the message');
        return true;
      });
    } finally {
      await router.close();
      delete process.env.PGPASSWORD;
    }
  }
});

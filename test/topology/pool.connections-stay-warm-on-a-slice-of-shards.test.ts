import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import {
  createRouter,
  type Router,
  type RouterOptions,
} from '../../packages/shardflake/src/router/router.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

/**
 * Issue 33, item 2: a PostgreSQL backend keeps what it loaded for every shard it served (≈ 155 kB per shard
 * written), so a pooled connection that served every shard of a big server holds hundreds of MB. A router's
 * connections now (1) prefer the shards they served before, so a pool settles into slices, and (2) are closed when
 * released once they served more than `shardsPerConnection` distinct shards. Each test reads the backend's pid in
 * the session, which tells which pooled connection served it.
 */
const [server] = await useServers(1);
if (!server) throw new Error('no server');
const config = testConfig([server], { logicalShards: 32 });
const routers: Router[] = [];

before(async () => {
  await initCluster(config);
});
after(async () => {
  await Promise.all(routers.map((r) => r.close()));
});

async function router(options: RouterOptions): Promise<Router> {
  const made = await createRouter(config, { listen: false, telemetry: false, ...options });
  routers.push(made);
  return made;
}

const pidOn = (r: Router, shard: number): Promise<number> =>
  r.withShard(
    { shard },
    async (s) => (await s.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid as number,
  );

test('a connection that served more than shardsPerConnection distinct shards is closed when released, and only then', async () => {
  const r = await router({ poolSize: 1, shardsPerConnection: 3 });
  const first = await pidOn(r, 0);
  // Shards 1 and 2 make three: still within the bound; shard 0 again is not a new shard.
  assert.equal(await pidOn(r, 1), first);
  assert.equal(await pidOn(r, 2), first);
  assert.equal(await pidOn(r, 0), first);
  // The fourth distinct shard is served by the same connection, which is closed when it comes back.
  assert.equal(await pidOn(r, 3), first);
  const second = await pidOn(r, 0);
  assert.notEqual(second, first);
  // The new connection counts from zero.
  assert.equal(await pidOn(r, 1), second);
});

test('a free connection that served a shard before serves it again, where a plain pool hands out the last one returned', async () => {
  const r = await router({ poolSize: 2 });
  // Two connections, each warm on one shard: hold both at once.
  let release = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const onFive = r.withShard({ shard: 5 }, async (s) => {
    const pid = (await s.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid as number;
    await held;
    return pid;
  });
  const onSix = await pidOn(r, 6);
  release();
  const five = await onFive;
  assert.notEqual(five, onSix);
  // The connection of shard 5 came back last, so pg-pool alone would hand it out next, also for shard 6.
  for (let i = 0; i < 6; i++) {
    assert.equal(await pidOn(r, 6), onSix, `round ${i}: shard 6 on its own connection`);
    assert.equal(await pidOn(r, 5), five, `round ${i}: shard 5 on its own connection`);
  }
  // A shard neither served goes to the one that served fewer: both served one, so either; then it stays there.
  const seven = await pidOn(r, 7);
  assert.ok([five, onSix].includes(seven));
  assert.equal(await pidOn(r, 5), five);
  assert.equal(await pidOn(r, 7), seven);
});

test('every shard of a transaction across shards counts; router.sql, which reads the shards in pieces, does not', async () => {
  const r = await router({ poolSize: 1, shardsPerConnection: 2 });
  const first = await pidOn(r, 0);
  // router.sql reads all 32 shards on the one connection; pieces do not count toward the bound.
  const { rows } = await r.sql('SELECT count(*) AS n FROM photos');
  assert.equal(Number(rows[0]?.n), 0);
  assert.equal(await pidOn(r, 0), first);
  // Three shards of one server in one transaction: one connection, three shards, over the bound of 2.
  const pids = await r.withShards([{ shard: 0 }, { shard: 1 }, { shard: 2 }], (sessions) =>
    Promise.all(
      sessions.map(
        async (s) => (await s.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid,
      ),
    ),
  );
  assert.deepEqual(pids, [first, first, first]);
  assert.notEqual(await pidOn(r, 0), first);
});

test('single-row writes and reads count their shard', async () => {
  const r = await router({ poolSize: 1, shardsPerConnection: 1 });
  const first = await pidOn(r, 0);
  // Shard 0 again (the insert's key) keeps the connection; a get on another shard is a second shard.
  const id = await r.insert('photos', { user_id: 0n, caption: 'a' }, { key: 0n });
  assert.equal(await pidOn(r, 0), first);
  await r.insert('photos', { user_id: 1n, caption: 'b' }, { key: 1n });
  assert.notEqual(await pidOn(r, 0), first);
  assert.equal((await r.get<{ caption: string }>('photos', id))?.caption, 'a');
});

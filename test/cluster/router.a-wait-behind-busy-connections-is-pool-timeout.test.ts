import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { after, before, it } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import {
  checkout,
  connect,
  createPool,
  wrapPgError,
} from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

/**
 * pg-pool reports a wait behind busy connections with the words it uses for a server slow to accept ("timeout
 * exceeded when trying to connect"); the router tells them apart, so the message points at the pool, not the
 * server (a CI run once failed on that line with 12 writers sharing 4 connections).
 */
const servers = await useServers(1);
const config = testConfig(servers, { logicalShards: 2 });
let router: Router;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 1, connectTimeoutMs: 300 });
});
after(async () => {
  await router?.close();
});

it('an operation that waits past connectTimeoutMs behind a busy pool fails with POOL_TIMEOUT, and the next one runs', async () => {
  let release = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  let holding = () => {};
  const started = new Promise<void>((resolve) => {
    holding = resolve;
  });
  const holder = router.withShard({ shard: 0 }, async (s) => {
    await s.query('SELECT 1');
    holding();
    await held;
  });
  await started;
  const waitedFrom = performance.now();
  await assert.rejects(
    router.withShard({ shard: 1 }, (s) => s.query('SELECT 1')),
    (e: unknown) => {
      assert.ok(isShardflakeError(e, 'POOL_TIMEOUT'), String(e));
      assert.match(
        e.message,
        /^server a: no connection of the pool came free within 300 ms: all 1 stayed busy \(raise the router's poolSize/,
      );
      return true;
    },
  );
  assert.ok(performance.now() - waitedFrom >= 290, 'it waited the whole connectTimeoutMs');
  release();
  await holder;
  const rows = await router.withShard({ shard: 1 }, async (s) => (await s.query('SELECT 2 AS n')).rows);
  assert.deepEqual(rows, [{ n: 2 }]);
});

it('a server that takes the connection but never answers is SERVER_UNREACHABLE, not POOL_TIMEOUT', async () => {
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const { port } = silent.address() as { port: number };
  const pool = createPool(`postgres://app@127.0.0.1:${port}/app`, { max: 1, connectTimeoutMs: 200 });
  try {
    const error = await checkout(pool).then(
      () => assert.fail('connected to a server that never answers'),
      (e: unknown) => wrapPgError(e),
    );
    assert.ok(isShardflakeError(error, 'SERVER_UNREACHABLE'), String(error));
    assert.match(error.message, /unreachable \(no connection within the connect timeout\)$/);
    // A single client (not a pool) says it in other words; the same code.
    await assert.rejects(
      connect(`postgres://app@127.0.0.1:${port}/app`, { connectTimeoutMs: 200 }),
      (e: unknown) => isShardflakeError(e, 'SERVER_UNREACHABLE') && /connect timeout\)$/.test(e.message),
    );
  } finally {
    await pool.end();
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
});

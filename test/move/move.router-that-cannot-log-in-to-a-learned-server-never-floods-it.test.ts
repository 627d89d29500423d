import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter, type Router } from '../../packages/shardflake/src/router/router.js';
import { sqlRows, useServers } from '../support/postgres.js';
import { makeCluster, rawConfig, sleep } from './fixture.js';

/**
 * Issue 32, item 1: one stale application instance shut a new server out for everyone. A router whose config
 * lists a and b only learns server c from the catalog after a shard moved there; with no password for c, every
 * failed connection stayed open on c until the server's authentication_timeout (node-postgres leaves the socket
 * of a connect it aborted itself, e.g. "client password must be a string", and pg-pool never ends it), and every
 * operation dialled again. Within seconds c refused everyone, the mover and correctly configured routers
 * included ("sorry, too many clients already").
 *
 * Here c allows 40 connections. The stale router hammers the moved shard (20 callers, 4 s); c's backends from it
 * are counted all along, a second router with c's password writes to the moved shard all along, and the mover
 * moves another shard to c meanwhile.
 */
const servers = await useServers(3, { settings: { max_connections: 40 } });
const old = await makeCluster(servers.slice(0, 2), 4);
const withC = validateConfig(rawConfig(servers, 4), 'config with server c');
const c = servers[2] as (typeof servers)[0];
const POOL_SIZE = 10;

/**
 * Client backends on c: all of them, and those still in authentication (no role yet, or no state). When c refuses
 * this check too ("too many clients"), that is what it says.
 */
const backendsOnC = async (): Promise<{ n: number; pending: number } | 'refused'> => {
  try {
    return (
      await sqlRows<{ n: number; pending: number }>(
        c.url,
        `SELECT count(*)::int AS n, count(*) FILTER (WHERE usename IS NULL OR state IS NULL)::int AS pending
           FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`,
      )
    )[0] as { n: number; pending: number };
  } catch (error) {
    if ((error as { code?: string }).code === '53300') return 'refused';
    throw error;
  }
};

test('a router without the password of a server it learned from the catalog holds at most its pool on it, fails fast with AUTH_FAILED, and leaves nothing after close; the mover and a configured router keep working', async () => {
  delete process.env.PGPASSWORD;
  await moveShard(withC, 0, 'c');
  const good = await createRouter(withC, { poolSize: 4 });
  const id = await good.insert('items', { note: 'on c' }, { shard: 0 });
  const stale: Router = await createRouter(old, { poolSize: POOL_SIZE });
  const failures: unknown[] = [];
  const goodErrors: unknown[] = [];
  let goodWrites = 0;
  let maxPending = 0;
  let checksRefused = 0;
  let stop = false;
  const hammer = async () => {
    while (!stop) {
      try {
        await stale.get('items', id);
      } catch (error) {
        failures.push(error);
      }
      await sleep(5);
    }
  };
  const writer = async () => {
    while (!stop) {
      try {
        await good.insert('items', { note: 'configured router' }, { shard: 0 });
        goodWrites++;
      } catch (error) {
        goodErrors.push(error);
      }
      await sleep(20);
    }
  };
  const watch = async () => {
    while (!stop) {
      const seen = await backendsOnC();
      if (seen === 'refused') checksRefused++;
      else maxPending = Math.max(maxPending, seen.pending);
      await sleep(100);
    }
  };
  let moveError: unknown;
  const started = performance.now();
  const running = [...Array.from({ length: 20 }, hammer), writer(), watch()];
  try {
    await sleep(1000);
    // The mover needs connections on c too, while the stale router hammers it.
    await moveShard(withC, 1, 'c').catch((error: unknown) => {
      moveError = error;
    });
    while (performance.now() - started < 4000) await sleep(100);
  } finally {
    stop = true;
    await Promise.all(running);
    await stale.close();
  }
  const afterClose = await backendsOnC();
  await good.close();
  const afterBoth = await backendsOnC();
  const said = (seen: typeof afterClose) => (seen === 'refused' ? 'c refused the check' : `${seen.pending}`);
  console.log(
    `stale router: ${failures.length} failed gets, ${failures.filter((e) => (e as { detail?: string }).detail === undefined).length} of them dialled c; c's backends in authentication: at most ${maxPending} while hammered (${checksRefused} checks refused: too many clients), ${said(afterClose)} after its close; configured router: ${goodWrites} writes, ${goodErrors.length} errors; mover: ${moveError ? String(moveError) : 'moved shard 1'}`,
  );
  assert.equal(moveError, undefined, 'the mover moved a shard to c meanwhile');
  assert.equal(checksRefused, 0, 'c never refused a connection');

  assert.deepEqual(
    goodErrors.map((e) => (e as Error).message),
    [],
    'the configured router never failed',
  );
  assert.ok(goodWrites > 20, `the configured router kept writing (${goodWrites})`);
  assert.equal(good.placement(1).server, 'c', 'the mover moved shard 1 to c meanwhile');
  assert.ok(maxPending <= POOL_SIZE, `at most the pool size in authentication on c (${maxPending})`);
  assert.deepEqual(
    afterClose !== 'refused' && afterClose.pending,
    0,
    'no connection left in authentication after close',
  );
  assert.deepEqual(
    afterBoth !== 'refused' && afterBoth.n,
    0,
    'no connection of either router left on c after both closed',
  );
  assert.ok(failures.length > 0);
  // Connection attempts: a failure without the `detail` of a remembered refusal is one that dialled c.
  const dialled = failures.filter((e) => (e as { detail?: string }).detail === undefined).length;
  assert.ok(dialled <= 2 * POOL_SIZE + 5, `the router dialled c ${dialled} times in 4 s`);
  for (const e of failures) {
    assert.ok(isShardflakeError(e, 'AUTH_FAILED'), String(e));
    assert.match(e.message, /server c\b/);
    assert.match(e.message, /role postgres/);
    assert.match(e.message, /\$\{VAR\}|pgpass/);
  }
  // One shard of the cluster: its rows are all there on c, the stale router's failures changed nothing.
  const rows = await sqlRows<{ n: number }>(
    c.url,
    `SELECT count(*)::int AS n FROM "${shardSchema(old, 0)}".items`,
  );
  assert.equal(rows[0]?.n, goodWrites + 1);
});

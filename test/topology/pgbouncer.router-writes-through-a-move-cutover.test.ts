import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import pg from 'pg';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { startPgBouncer } from '../support/pgbouncer.js';
import { useServers } from '../support/postgres.js';

/**
 * A router that reaches both servers only through PgBouncer (transaction mode) keeps writing to a shard while the
 * shard moves (the move itself talks to the servers directly: it holds locks and replication objects across
 * transactions). The cutover's fence and the map switch must reach the router through the bouncer: writes that
 * hit the fence retry on the new home, and every acknowledged row ends up there.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const [bouncerA, bouncerB] = [await startPgBouncer(a), await startPgBouncer(b)];
const tables = { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL)' };
const direct = validateConfig(
  { servers: { a: a.url, b: b.url }, catalog: 'a', logicalShards: 4, tables },
  'direct',
);
const viaBouncer = validateConfig(
  { servers: { a: bouncerA.url, b: bouncerB.url }, catalog: 'a', logicalShards: 4, tables },
  'bouncer',
);
await initCluster(direct);
const retries: string[] = [];
const router = await createRouter(viaBouncer, {
  listen: false,
  poolSize: 4,
  onEvent: (e) => {
    if (e.type === 'retry') retries.push(e.reason);
  },
});
after(() => router.close());

test('writes through PgBouncer continue across a move cutover and land on the new home', async () => {
  const shard = router.placement(0).server === 'a' ? 0 : 3;
  const from = router.placement(shard).server;
  const to = from === 'a' ? 'b' : 'a';
  const acknowledged: bigint[] = [];
  const failures: unknown[] = [];
  let stop = false;
  const writer = (async () => {
    for (let i = 0; !stop; i++) {
      try {
        acknowledged.push(await router.insert('items', { note: `n${i}` }, { shard }));
      } catch (error) {
        failures.push(error);
      }
    }
  })();
  while (acknowledged.length < 20) await new Promise((r) => setTimeout(r, 10));
  await moveShard(direct, shard, to);
  const atCutover = acknowledged.length;
  const deadline = performance.now() + 10_000;
  while (acknowledged.length < atCutover + 20 && performance.now() < deadline)
    await new Promise((r) => setTimeout(r, 10));
  stop = true;
  await writer;
  assert.deepEqual(failures.map(String), []);
  assert.ok(acknowledged.length >= atCutover + 20, 'writes stopped after the cutover');
  // the writer never pauses, so writes meet the cutover (its fence or its lock) and retry
  assert.ok(
    retries.some((r) => r === 'fenced' || r === 'moving'),
    `no write met the cutover: ${retries}`,
  );
  await router.refresh();
  assert.equal(router.placement(shard).server, to);
  const client = new pg.Client((to === 'a' ? a : b).url);
  await client.connect();
  const { rows } = await client.query(`SELECT id::text FROM shard_000${shard}.items`);
  await client.end();
  const present = new Set(rows.map((r) => r.id as string));
  assert.deepEqual(
    acknowledged.filter((id) => !present.has(String(id))),
    [],
  );
});

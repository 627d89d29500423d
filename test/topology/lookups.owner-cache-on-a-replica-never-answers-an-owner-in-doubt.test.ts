import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { createRouter, type Router, type RouterEvent } from 'shardflake';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';

/**
 * The owner cache reading a replica (lookups/owner-cache.ts). Server a has a streaming replica, server b none;
 * 4 shards (0–1 on a, 2–3 on b). A lookup reads a's shards on the replica (no write of this router to wait for).
 * A standby lists no prepared transaction — it replays the primary's as still in progress — so the cache's check
 * must not trust a row version whose xmax is set there. The interleaving of a coordinator that died after its
 * decision, made by hand: the owner's change of email PREPARED on a (replayed to the replica: the replica still
 * shows the old email), its entry's removal committed on b, the email claimed by a row on b. The cached lookup,
 * answered from the replica, must give the claimer, never the old owner; a row whose xmax is 0 is still a hit
 * there (one read, on the replica).
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const replica = await startReplica(a);
const config = validateConfig(
  {
    servers: { a: [a.url, replica.url], b: b.url },
    catalog: 'a',
    logicalShards: 4,
    tables: {
      users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)',
    },
    lookups: { user_email: { table: 'users', column: 'email', unique: true } },
  },
  'test-config',
);
const events: RouterEvent[] = [];
let router: Router;
let reader: Router;
let primaryA: pg.Client;
let primaryB: pg.Client;

before(async () => {
  await initCluster(config);
  // One router writes; the other only reads, so nothing it wrote keeps its reads on the primary.
  router = await createRouter(config, { transactions: { recovery: false } });
  reader = await createRouter(config, { transactions: { recovery: false }, onEvent: (e) => events.push(e) });
  primaryA = await connect(a.url);
  primaryB = await connect(b.url);
});
after(async () => {
  await router?.close();
  await reader?.close();
  await primaryA?.end();
  await primaryB?.end();
});

/** Who `reader` says holds the email, and the roles of the nodes its lookup read. */
async function readerSays(email: string) {
  events.length = 0;
  const hit = await reader.lookup('user_email', email, { fetch: true });
  const roles = events.flatMap((e) => (e.type === 'operation' ? e.nodes.map((n) => n.role) : []));
  return { name: (hit?.row.name as string | undefined) ?? null, roles };
}

/** An email whose entry lives on server b. */
function emailOnB(prefix: string): string {
  for (let i = 0; ; i++) if (shardForKey(`${prefix}${i}@x`, 4) >= 2) return `${prefix}${i}@x`;
}

test('a cached lookup answered by a replica never gives an owner whose change is prepared on its primary', async () => {
  const email = emailOnB('doubt');
  const id = await router.insert('users', { name: 'in-doubt', email }, { shard: 0 });
  await caughtUp(a, replica);
  // Through the entry (on b's primary), then the owner on a's replica; then remembered: one read, on the replica.
  assert.deepEqual(await readerSays(email), { name: 'in-doubt', roles: ['primary', 'replica'] });
  assert.deepEqual(await readerSays(email), { name: 'in-doubt', roles: ['replica'] });

  await primaryA.query('BEGIN');
  await primaryA.query('SET LOCAL session_replication_role = replica');
  await primaryA.query(`UPDATE "${shardSchema(config, 0)}".users SET email = 'elsewhere@x' WHERE id = $1`, [
    id,
  ]);
  await primaryA.query(`PREPARE TRANSACTION 'owner-cache-replica-test'`);
  try {
    await primaryB.query(
      `DELETE FROM "${shardSchema(config, shardForKey(email, 4))}"._shardflake_lookup_user_email WHERE value = $1`,
      [email],
    );
    await router.insert('users', { name: 'reclaimer', email }, { shard: 3 });
    await caughtUp(a, replica);
    const shown = new pg.Client({ connectionString: replica.url });
    await shown.connect();
    try {
      const { rows } = await shown.query(
        `SELECT email FROM "${shardSchema(config, 0)}".users WHERE id = $1`,
        [id],
      );
      assert.equal(rows[0]?.email, email, 'the replica still shows the old owner holding the email');
    } finally {
      await shown.end();
    }
    const answer = await readerSays(email);
    assert.equal(answer.name, 'reclaimer');
    assert.equal(answer.roles[0], 'replica', 'the cached read went to the replica');
  } finally {
    await primaryA.query(`COMMIT PREPARED 'owner-cache-replica-test'`);
  }
  // A row whose version no one touched since is a hit on the replica.
  const fresh = emailOnB('fresh');
  await router.insert('users', { name: 'fresh', email: fresh }, { shard: 1 });
  await caughtUp(a, replica);
  await readerSays(fresh);
  assert.deepEqual(await readerSays(fresh), { name: 'fresh', roles: ['replica'] });
});

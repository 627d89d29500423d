import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import type { ShardflakeId } from '../../packages/shardflake/src/ids/id.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { queriesDuring } from '../support/queries.js';
import { usersWithEmailLookup } from './cluster-config.js';

/**
 * Every path of the owner cache (lookups/owner-cache.ts) on two servers, 4 shards (0–1 on a, 2–3 on b), each case
 * built so that a cache that trusted its shard would answer a row that no longer holds the value:
 * - a hit is one read, and returns the owner with its row;
 * - the owner changed its value, or was deleted: the hit misses, and the entry answers (null, or the row that
 *   claimed the value since, on another shard);
 * - another row of the cached shard claimed the value: the hit answers that row (the owner now);
 * - the owner's change stays PREPARED on its server after its entry change committed (a coordinator that died
 *   after its decision, made by hand here), and another row claims the value: the cached lookup never answers
 *   the old owner, whose old version its server still shows — null before the claim, the claimer after;
 * - a row version whose xmax is set by a lock that has ended (no prepared transaction) is still a hit;
 * - the cached shard moves to the other server: the hit reads it there, and a change made there is seen.
 * A router without the cache (`lookupCacheSize: 0`) gives the same answers throughout.
 */
const servers = await useServers(2);
const config = usersWithEmailLookup(servers);
let router: Router;
let plain: Router;
const admin = new Map<string, pg.Client>();
const serverOf = (shard: number) => (shard < 2 ? 'a' : 'b');

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false } });
  plain = await createRouter(config, { lookupCacheSize: 0, transactions: { recovery: false } });
  for (const s of servers) admin.set(s.name, await connect(s.url));
});
after(async () => {
  await router?.close();
  await plain?.close();
  await Promise.all([...admin.values()].map((c) => c.end()));
});

let counter = 0;
/** A fresh email whose entry lives on `entryServer`. */
function email(entryServer: 'a' | 'b'): string {
  for (;;) {
    const value = `cache${++counter}@example.com`;
    if (serverOf(shardForKey(value, 4)) === entryServer) return value;
  }
}

/** Who each router says holds `value` (the row's name), with the cached router's query count. */
async function holders(value: string) {
  const { result, queries } = await queriesDuring(() => router.lookup('user_email', value, { fetch: true }));
  const reference = await plain.lookup('user_email', value, { fetch: true });
  return {
    cached: (result?.row.name as string | undefined) ?? null,
    plain: (reference?.row.name as string | undefined) ?? null,
    queries,
  };
}

/** Inserts a user in `shard` and makes the cached router remember its email (its second lookup is a hit). */
async function owner(name: string, value: string, shard: number): Promise<ShardflakeId> {
  const id = await router.insert('users', { name, email: value }, { shard });
  assert.equal((await holders(value)).cached, name);
  assert.deepEqual(await holders(value), { cached: name, plain: name, queries: 1 });
  return id;
}

describe('the owner cache', () => {
  it('a hit is one read and answers the owner with its row', async () => {
    const value = email('b');
    const id = await owner('hit', value, 0);
    const hit = await router.lookup('user_email', value);
    assert.deepEqual(hit, { id, shard: 0 });
  });

  it('an owner that changed its value or was deleted is a miss, and the entry answers', async () => {
    const changed = email('b');
    const id = await owner('changer', changed, 1);
    await router.update('users', id, { email: email('a') });
    // A miss (one read) then the entry (one read, no entry): null, as without the cache.
    assert.deepEqual(await holders(changed), { cached: null, plain: null, queries: 2 });
    // Claimed since by a row on the other server: the entry finds it (the null forgot the value), and the cache
    // learns it.
    await router.insert('users', { name: 'claimer', email: changed }, { shard: 3 });
    assert.deepEqual(await holders(changed), { cached: 'claimer', plain: 'claimer', queries: 2 });
    assert.deepEqual(await holders(changed), { cached: 'claimer', plain: 'claimer', queries: 1 });

    const deleted = email('a');
    const gone = await owner('leaver', deleted, 2);
    await router.delete('users', gone);
    assert.deepEqual(await holders(deleted), { cached: null, plain: null, queries: 2 });
  });

  it('another row of the cached shard that claimed the value is the answer of the hit', async () => {
    const value = email('a');
    const first = await owner('first', value, 2);
    await router.update('users', first, { email: email('b') });
    await router.insert('users', { name: 'second', email: value }, { shard: 2 });
    assert.deepEqual(await holders(value), { cached: 'second', plain: 'second', queries: 1 });
  });

  it('an owner whose change stays prepared on its server after its entry moved on is never the answer', async () => {
    // The owner's row is in shard 0 (server a), the value's entry on server b: the interleaving of a coordinator
    // that died after its decision — entry change committed on b, the row's change prepared on a.
    const value = email('b');
    const id = await owner('in-doubt', value, 0);
    const a = defined(admin.get('a'));
    const b = defined(admin.get('b'));
    await a.query('BEGIN');
    // Triggers off for this hand-made transaction (its entries are written by hand on b below).
    await a.query('SET LOCAL session_replication_role = replica');
    await a.query(`UPDATE "${shardSchema(config, 0)}".users SET email = 'elsewhere' WHERE id = $1`, [id]);
    await a.query(`PREPARE TRANSACTION 'owner-cache-test'`);
    try {
      const entryShard = shardSchema(config, shardForKey(value, 4));
      await b.query(`DELETE FROM "${entryShard}"._shardflake_lookup_user_email WHERE value = $1`, [value]);
      // Server a still shows the old owner holding the value; the cache must not answer it.
      const { rows } = await a.query(`SELECT email FROM "${shardSchema(config, 0)}".users WHERE id = $1`, [
        id,
      ]);
      assert.equal(rows[0]?.email, value);
      assert.deepEqual(await holders(value), { cached: null, plain: null, queries: 2 });
      // Re-claimed by a row on the other server while the change is still in doubt.
      await router.insert('users', { name: 'reclaimer', email: value }, { shard: 3 });
      const after = await holders(value);
      assert.equal(after.cached, 'reclaimer');
      assert.equal(after.plain, 'reclaimer');
    } finally {
      await a.query(`COMMIT PREPARED 'owner-cache-test'`);
    }
    // Settled: the value's row is the claimer's, now also from the cache.
    assert.deepEqual(await holders(value), { cached: 'reclaimer', plain: 'reclaimer', queries: 1 });
  });

  it('a row version locked by a transaction that has ended is still a hit', async () => {
    const value = email('a');
    const id = await owner('locked', value, 1);
    const a = defined(admin.get('a'));
    await a.query('BEGIN');
    await a.query(`SELECT 1 FROM "${shardSchema(config, 1)}".users WHERE id = $1 FOR UPDATE`, [id]);
    await a.query('COMMIT');
    const { rows } = await a.query(
      `SELECT xmax::text <> '0' AS stamped FROM "${shardSchema(config, 1)}".users WHERE id = $1`,
      [id],
    );
    assert.equal(rows[0]?.stamped, true);
    assert.deepEqual(await holders(value), { cached: 'locked', plain: 'locked', queries: 1 });
  });

  it('a cached shard that moves is read on its new server, where later changes are seen', async () => {
    const value = email('a');
    const id = await owner('mover', value, 1);
    await moveShard(config, 1, 'b');
    await Promise.all([router.refresh(), plain.refresh()]);
    assert.equal(router.placement(1).server, 'b');
    // The move took seconds: pooled connections idle that long are closed, and a new one's first use adds a
    // query (the router's look at its node). The first read after the move opens it; the second is counted.
    assert.equal((await holders(value)).cached, 'mover');
    assert.deepEqual(await holders(value), { cached: 'mover', plain: 'mover', queries: 1 });
    await router.update('users', id, { email: email('b') });
    assert.deepEqual(await holders(value), { cached: null, plain: null, queries: 2 });
  });
});

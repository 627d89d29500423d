import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { queriesDuring } from '../support/queries.js';
import { usersWithEmailLookup } from './cluster-config.js';

/**
 * The sign-up path of a table with a unique lookup (router.insert), on two servers with 4 shards (0–1 on a, 2–3 on
 * b), through a router whose pools hold one connection each:
 * - its round trips, counted as the queries the router's connections are given: when the entry's shard is on the
 *   row's server, one — BEGIN, the row's insert, its entry written from the change row, COMMIT in one batch
 *   (lookups/insert-beside.ts); with the entry on the other server, the row's insert goes out with the
 *   transaction's BEGIN and the read of the change table, the other server's batch ends in PREPARE, then the
 *   decision and its COMMIT in one, and COMMIT PREPARED: four;
 * - a claim refused because the value is taken fails inside a batch, where the COMMIT or PREPARE after the check
 *   does not run: the transaction must still be rolled back, so the one pooled connection serves the next call and
 *   nothing of the refused row is left, whichever server the entry is on.
 */
const servers = await useServers(2);
const [a, b] = servers;
const config = usersWithEmailLookup(servers);
let router: Router;
const admin: pg.Client[] = [];

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 1, listen: false, transactions: { recovery: false } });
  admin.push(await connect(defined(a).url), await connect(defined(b).url));
});
after(async () => {
  await router?.close();
  await Promise.all(admin.map((c) => c.end()));
});

const serverOf = (shard: number) => (shard < 2 ? 'a' : 'b');

/** A fresh (name, email) whose row is on server `row` and whose entry is on server `entry`. */
let counter = 0;
function signUp(row: 'a' | 'b', entry: 'a' | 'b'): { name: string; email: string } {
  for (;;) {
    const n = ++counter;
    const name = `user${n}`;
    const email = `user${n}@example.com`;
    if (serverOf(shardForKey(name, 4)) === row && serverOf(shardForKey(email, 4)) === entry)
      return { name, email };
  }
}

async function rowsNamed(name: string): Promise<number> {
  let n = 0;
  for (const client of admin)
    for (let shard = 0; shard < 4; shard++) {
      const schema = `shard_${String(shard).padStart(4, '0')}`;
      const { rows } = await client
        .query(`SELECT count(*)::int AS n FROM "${schema}".users WHERE name = $1`, [name])
        .catch(() => ({ rows: [{ n: 0 }] }));
      n += (rows[0] as { n: number }).n;
    }
  return n;
}

describe('sign-up with a unique lookup', () => {
  it('takes one round trip when the entry shares the row’s server, five across servers, and keeps the entry', async () => {
    // A first sign-up each way opens the connections and learns the servers can prepare.
    for (const entry of ['a', 'b'] as const) {
      const warm = signUp('a', entry);
      await router.insert('users', warm, { key: warm.name });
    }
    const same = signUp('a', 'a');
    assert.equal((await queriesDuring(() => router.insert('users', same, { key: same.name }))).queries, 1);
    // Across servers: the row's batch; the entry, written before anything is prepared (a wait on its unique index
    // must be one the deadlock detector can still break); PREPARE; the decision with its COMMIT; COMMIT PREPARED.
    const across = signUp('a', 'b');
    assert.equal(
      (await queriesDuring(() => router.insert('users', across, { key: across.name }))).queries,
      5,
    );
    for (const user of [same, across]) {
      const hit = await router.lookup('user_email', user.email, { fetch: true });
      assert.equal(hit?.row.name, user.name);
    }
  });

  for (const entry of ['a', 'b'] as const) {
    it(`a claim of a taken value (entry on server ${entry}) is refused, rolled back, and its connection serves the next call`, async () => {
      const owner = signUp('a', entry);
      await router.insert('users', owner, { key: owner.name });
      const loser = signUp('a', entry);
      await assert.rejects(
        router.insert('users', { name: loser.name, email: owner.email }, { key: loser.name }),
        (error: unknown) =>
          isShardflakeError(error) &&
          error.code === 'UNIQUE_VIOLATION' &&
          !error.message.includes(owner.email),
      );
      assert.equal(await rowsNamed(loser.name), 0);
      // Pools of one connection: a connection left in the refused transaction would fail this insert.
      await router.insert('users', loser, { key: loser.name });
      assert.equal((await router.lookup('user_email', loser.email, { fetch: true }))?.row.name, loser.name);
      assert.equal((await router.lookup('user_email', owner.email, { fetch: true }))?.row.name, owner.name);
      const prepared = await Promise.all(admin.map((c) => c.query('SELECT gid FROM pg_prepared_xacts')));
      assert.deepEqual(
        prepared.flatMap((r) => r.rows),
        [],
      );
    });
  }

  it('a claim refused on the last agent of a transaction across servers fails before anything is prepared, as UNIQUE_VIOLATION, leaving nothing', async () => {
    // withShards joins server a first, so a is the last agent: the loser's entry (on a) is written before b is
    // prepared and before the decision; its refusal must roll both back.
    const owner = signUp('b', 'a');
    await router.insert('users', owner, { key: owner.name });
    const loser = signUp('b', 'a');
    const bystander = signUp('a', 'a');
    await assert.rejects(
      router.withShards([{ key: bystander.name }, { key: loser.name }], async ([x, y]) => {
        await x?.query('INSERT INTO users (name, email) VALUES ($1, $2)', [bystander.name, bystander.email]);
        await y?.query('INSERT INTO users (name, email) VALUES ($1, $2)', [loser.name, owner.email]);
      }),
      (error: unknown) => isShardflakeError(error) && error.code === 'UNIQUE_VIOLATION',
    );
    assert.equal(await rowsNamed(loser.name), 0);
    assert.equal(await rowsNamed(bystander.name), 0);
    assert.equal(await router.lookup('user_email', bystander.email), null);
    const prepared = await Promise.all(admin.map((c) => c.query('SELECT gid FROM pg_prepared_xacts')));
    assert.deepEqual(
      prepared.flatMap((r) => r.rows),
      [],
    );
    // Both pooled connections were rolled back: the same writes with the loser's own email commit.
    await router.withShards([{ key: bystander.name }, { key: loser.name }], async ([x, y]) => {
      await x?.query('INSERT INTO users (name, email) VALUES ($1, $2)', [bystander.name, bystander.email]);
      await y?.query('INSERT INTO users (name, email) VALUES ($1, $2)', [loser.name, loser.email]);
    });
    assert.equal((await router.lookup('user_email', loser.email, { fetch: true }))?.row.name, loser.name);
    assert.equal((await router.lookup('user_email', owner.email, { fetch: true }))?.row.name, owner.name);
  });
});

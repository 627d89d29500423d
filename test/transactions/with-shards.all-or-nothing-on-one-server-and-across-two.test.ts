import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router, type RouterEvent } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';

// a and b can prepare transactions; c cannot (max_prepared_transactions = 0), which must not matter for
// transactions that stay on c.
const [a, b] = await useServers(2);
const [c] = await useServers(1, { settings: { max_prepared_transactions: 0 } });
const urls = { a: a?.url as string, b: b?.url as string, c: c?.url as string };
const config = validateConfig(
  {
    servers: urls,
    catalog: 'a',
    logicalShards: 6, // 0,1 on a; 2,3 on b; 4,5 on c
    epoch: '2024-01-01T00:00:00Z',
    tables: {
      accounts: 'CREATE TABLE accounts (name text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0))',
      // A deferred unique constraint fails at COMMIT or PREPARE, after every statement succeeded.
      late: 'CREATE TABLE late (id bigint PRIMARY KEY DEFAULT next_id(), k int, CONSTRAINT late_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)',
    },
  },
  'test-config',
);
let router: Router;
const events: RouterEvent[] = [];

async function balances(shards: number[]): Promise<bigint[]> {
  return Promise.all(
    shards.map((shard) =>
      router.withShard({ shard }, async (s) => {
        const { rows } = await s.query<{ balance: bigint }>(`SELECT balance FROM accounts WHERE name = 'x'`);
        return rows[0]?.balance as bigint;
      }),
    ),
  );
}

async function prepared(server: keyof typeof urls): Promise<string[]> {
  const client = await connect(urls[server]);
  try {
    const { rows } = await client.query('SELECT gid FROM pg_prepared_xacts');
    return rows.map((r: { gid: string }) => r.gid);
  } finally {
    await client.end();
  }
}

/** Moves `amount` from the first shard's account to the second's, in one withShards. */
function transfer(from: number, to: number, amount: bigint) {
  return router.withShards([{ shard: from }, { shard: to }], async ([x, y]) => {
    await x?.query(`UPDATE accounts SET balance = balance - $1 WHERE name = 'x'`, [amount]);
    await y?.query(`UPDATE accounts SET balance = balance + $1 WHERE name = 'x'`, [amount]);
    return [x?.server, y?.server];
  });
}

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { onEvent: (e) => events.push(e), transactions: { recovery: false } });
  for (let shard = 0; shard < 6; shard++)
    await router.withShard({ shard }, (s) => s.query(`INSERT INTO accounts VALUES ('x', 100)`));
});
after(async () => {
  await router?.close();
});

describe('withShards commits every session or none', () => {
  it('two shards on one server without prepared transactions share one local transaction', async () => {
    assert.deepEqual([router.placement(4).server, router.placement(5).server], ['c', 'c']);
    events.length = 0;
    assert.deepEqual(await transfer(4, 5, 30n), ['c', 'c']);
    assert.deepEqual(await balances([4, 5]), [70n, 130n]);
    assert.equal(events.filter((e) => e.type === 'transaction').length, 0, 'no two-phase step on one server');
    // The callback throws after both updates: neither stays.
    await assert.rejects(
      router.withShards([{ shard: 4 }, { shard: 5 }], async ([x, y]) => {
        await x?.query(`UPDATE accounts SET balance = balance - 10 WHERE name = 'x'`);
        await y?.query(`UPDATE accounts SET balance = balance + 10 WHERE name = 'x'`);
        throw new Error('changed my mind');
      }),
      /changed my mind/,
    );
    // A statement fails on the second shard (the CHECK): the first shard's update goes too.
    await assert.rejects(transfer(5, 4, 1000n), (e) => isShardflakeError(e, 'DATABASE_ERROR'));
    assert.deepEqual(await balances([4, 5]), [70n, 130n]);
    // Each session sees its own shard's table under the unqualified name, whatever the other did last.
    const names = await router.withShards([{ shard: 4 }, { shard: 5 }, { shard: 4 }], async (sessions) =>
      Promise.all(
        sessions.map(
          async (s) => (await s.query<{ p: string }>('SELECT current_schemas(false)::text AS p')).rows[0]?.p,
        ),
      ),
    );
    assert.deepEqual(names, ['{shard_0004}', '{shard_0005}', '{shard_0004}']);
  });

  it('two servers: both commit, with gids that carry the cluster identity', async () => {
    events.length = 0;
    assert.deepEqual(await transfer(0, 2, 25n), ['a', 'b']);
    assert.deepEqual(await balances([0, 2]), [75n, 125n]);
    const steps = events.flatMap((e) =>
      e.type === 'transaction' ? [`${e.phase}:${e.step}:${e.server}`] : [],
    );
    assert.deepEqual(steps, [
      'prepare:start:b',
      'prepare:done:b',
      'decide:start:a',
      'decide:done:a',
      'commit-prepared:start:b',
      'commit-prepared:done:b',
    ]);
    const catalog = await connect(urls.a);
    const id = (await catalog.query('SELECT cluster_id FROM shardflake.cluster')).rows[0]?.cluster_id;
    const decisions = await catalog.query('SELECT outcome, gids FROM shardflake.transactions');
    await catalog.end();
    const prepare = events.find((e) => e.type === 'transaction' && e.phase === 'prepare');
    const gid = prepare?.type === 'transaction' ? (prepare.gid as string) : '';
    assert.match(gid, new RegExp(`^sf:${id}:[0-9a-z]+:a:b$`));
    assert.deepEqual(decisions.rows, [{ outcome: 'commit', gids: [gid] }]);
    assert.deepEqual([await prepared('a'), await prepared('b')], [[], []]);
  });

  it('two servers: a failure at PREPARE, at the decision or in the callback leaves both unchanged', async () => {
    const before = await balances([0, 2]);
    // The prepared participant (b) fails its deferred constraint at PREPARE.
    await assert.rejects(
      router.withShards([{ shard: 0 }, { shard: 2 }], async ([x, y]) => {
        await x?.query(`UPDATE accounts SET balance = balance - 5 WHERE name = 'x'`);
        await y?.query(`UPDATE accounts SET balance = balance + 5 WHERE name = 'x'`);
        await y?.query('INSERT INTO late (k) VALUES (1), (1)');
      }),
      (e) => isShardflakeError(e, 'TRANSACTION_ABORTED') && /server b/.test(e.message),
    );
    // The last agent (a) fails its deferred constraint at its COMMIT, after b was prepared.
    events.length = 0;
    await assert.rejects(
      router.withShards([{ shard: 0 }, { shard: 2 }], async ([x, y]) => {
        await x?.query(`UPDATE accounts SET balance = balance - 5 WHERE name = 'x'`);
        await y?.query(`UPDATE accounts SET balance = balance + 5 WHERE name = 'x'`);
        await x?.query('INSERT INTO late (k) VALUES (1), (1)');
      }),
      (e) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '23505',
    );
    const steps = events.flatMap((e) =>
      e.type === 'transaction' ? [`${e.phase}:${e.step}:${e.server}`] : [],
    );
    assert.deepEqual(steps, [
      'prepare:start:b',
      'prepare:done:b',
      'decide:start:a',
      'decide:failed:a',
      'rollback-prepared:start:b',
      'rollback-prepared:done:b',
    ]);
    // The callback throws.
    await assert.rejects(
      router.withShards([{ shard: 2 }, { shard: 1 }], async ([y, x]) => {
        await y?.query(`UPDATE accounts SET balance = balance + 5 WHERE name = 'x'`);
        await x?.query(`UPDATE accounts SET balance = balance - 5 WHERE name = 'x'`);
        throw new Error('no');
      }),
      /no/,
    );
    assert.deepEqual(await balances([0, 2]), before);
    assert.deepEqual(await balances([1]), [100n]);
    assert.deepEqual([await prepared('a'), await prepared('b')], [[], []]);
  });

  it('a server without prepared transactions is refused by name before the callback runs', async () => {
    let ran = false;
    await assert.rejects(
      router.withShards([{ shard: 0 }, { shard: 4 }], async () => {
        ran = true;
      }),
      (e) =>
        isShardflakeError(e, 'PREPARED_TRANSACTIONS_DISABLED') &&
        /server c/.test(e.message) &&
        /max_prepared_transactions/.test(e.message),
    );
    assert.equal(ran, false);
    assert.deepEqual(await balances([0, 4]), [75n, 70n]);
  });
});

it('on a pool of one connection per server, transactions naming two servers in opposite orders all commit: connections are taken in name order, so none holds one server while waiting for the other', async () => {
  // Taken in the targets' order, the first of each pair would hold a's only connection and the second b's, each
  // waiting for the other's until POOL_TIMEOUT (connectTimeoutMs below).
  const narrow = await createRouter(config, { poolSize: 1, connectTimeoutMs: 3000, listen: false });
  try {
    const names = Array.from({ length: 6 }, (_, i) => `order-${i}`);
    await Promise.all(
      names.map((name, i) =>
        narrow.withShards(
          i % 2 === 0 ? [{ shard: 0 }, { shard: 2 }] : [{ shard: 2 }, { shard: 0 }],
          (sessions) =>
            Promise.all(
              sessions.map((s) => s.query('INSERT INTO accounts (name, balance) VALUES ($1, 1)', [name])),
            ),
        ),
      ),
    );
    for (const shard of [0, 2]) {
      const found = await narrow.withShard({ shard }, async (s) =>
        (await s.query(`SELECT name FROM accounts WHERE name LIKE 'order-%' ORDER BY name`)).rows.map(
          (r) => r.name,
        ),
      );
      assert.deepEqual(found, names, `shard ${shard}`);
    }
  } finally {
    await narrow.close();
  }
});

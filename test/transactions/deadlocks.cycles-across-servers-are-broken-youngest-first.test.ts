import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  createRouter,
  type DeadlockEvent,
  isShardflakeError,
  type Router,
  type RouterEvent,
  type ShardSession,
} from 'shardflake';
import { formatStatus } from '../../packages/cli/src/cli/commands/cluster-status.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { clusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { CANCEL_TAGGED_SQL } from '../../packages/shardflake/src/deadlocks/graph.js';
import { formatTag } from '../../packages/shardflake/src/deadlocks/tag.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { pageBlocks } from '../docs/blocks.js';
import { useServers } from '../support/postgres.js';
import { until } from './support.js';

// Three servers, one shard each: shard 0 on a, 1 on b, 2 on c. Each shard holds one account, 'x', with 100.
const [a, b, c] = await useServers(3);
const urls = { a: a?.url as string, b: b?.url as string, c: c?.url as string };
const config = validateConfig(
  {
    servers: urls,
    catalog: 'a',
    logicalShards: 3,
    epoch: '2024-01-01T00:00:00Z',
    tables: {
      accounts: 'CREATE TABLE accounts (name text PRIMARY KEY, balance bigint NOT NULL)',
    },
  },
  'test-config',
);
let router: Router;
const events: RouterEvent[] = [];

before(async () => {
  await initCluster(config);
  // Default deadlock settings: the detector looks after 1000 ms of waiting, as PostgreSQL's deadlock_timeout.
  router = await createRouter(config, { onEvent: (e) => events.push(e), transactions: { recovery: false } });
  assert.deepEqual(
    [0, 1, 2].map((s) => router.placement(s).server),
    ['a', 'b', 'c'],
  );
  for (const shard of [0, 1, 2])
    await router.withShard({ shard }, (s) => s.query(`INSERT INTO accounts VALUES ('x', 100)`));
});
after(async () => {
  await router?.close();
});

async function balances(): Promise<bigint[]> {
  return Promise.all(
    [0, 1, 2].map((shard) =>
      router.withShard({ shard }, async (s) => {
        const { rows } = await s.query<{ balance: bigint }>(`SELECT balance FROM accounts WHERE name = 'x'`);
        return rows[0]?.balance as bigint;
      }),
    ),
  );
}

async function setBalances(value: bigint): Promise<void> {
  for (const shard of [0, 1, 2])
    await router.withShard({ shard }, (s) =>
      s.query(`UPDATE accounts SET balance = $1 WHERE name = 'x'`, [value]),
    );
}

/** A promise resolved by hand: the tests' synchronisation points (no sleeps decide who holds what). */
function signal() {
  let fire: () => void = () => {};
  const fired = new Promise<void>((resolve) => {
    fire = resolve;
  });
  return { fired, fire };
}

/** Resolves once `count` parties have arrived. */
function barrier(count: number) {
  const all = signal();
  let arrived = 0;
  return {
    async arrive() {
      if (++arrived === count) all.fire();
      await all.fired;
    },
  };
}

const ADD = `UPDATE accounts SET balance = balance + $1 WHERE name = 'x'`;

/**
 * A transfer that writes `from`'s shard first and `to`'s second, the second write held back until every transfer
 * of the cycle holds its first row (the barrier): this is the interleaving of two opposite transfers that deadlocks.
 * Records when its second write was sent, so the test knows when the cycle closed.
 */
function transfer(
  from: number,
  to: number,
  gate: { arrive(): Promise<void> },
  sent: number[],
  options?: Parameters<Router['withShards']>[2],
) {
  let runs = 0;
  const done = router.withShards(
    [{ shard: from }, { shard: to }],
    async ([payer, payee]) => {
      runs++;
      await (payer as ShardSession).query(ADD, [-10]);
      if (runs === 1) await gate.arrive();
      sent.push(performance.now());
      await (payee as ShardSession).query(ADD, [10]);
    },
    options,
  );
  return { done, runs: () => runs };
}

/** Starts transfers in order, a few ms apart so each is younger than the one before (the victim is the youngest). */
async function startInOrder<T>(starts: (() => T)[]): Promise<T[]> {
  const started: T[] = [];
  for (const start of starts) {
    if (started.length > 0) await new Promise((r) => setTimeout(r, 5));
    started.push(start());
  }
  return started;
}

const deadlockEvents = () => events.filter((e): e is DeadlockEvent => e.type === 'deadlock');

describe('a deadlock across servers is found and broken, its youngest transaction the one victim', () => {
  it('two transfers in opposite orders on two servers: the younger fails with DEADLOCK within 2 s, nothing of it commits, the older commits', async () => {
    await setBalances(100n);
    events.length = 0;
    // The exact interleaving: T1 locks x on a, T2 locks x on b; then T1 waits for x on b (T2's) and T2 for x on
    // a (T1's). Neither server sees a deadlock: each sees a wait on a session idle in its transaction.
    const gate = barrier(2);
    const sent: number[] = [];
    const [older, younger] = await startInOrder([
      () => transfer(0, 1, gate, sent),
      () => transfer(1, 0, gate, sent),
    ]);
    const outcome = await Promise.allSettled([older?.done, younger?.done]);
    const closedAt = Math.max(...sent.slice(0, 2));
    const brokenAfter = performance.now() - closedAt;
    assert.equal(outcome[0]?.status, 'fulfilled', String((outcome[0] as PromiseRejectedResult).reason));
    assert.equal(outcome[1]?.status, 'rejected');
    const error = (outcome[1] as PromiseRejectedResult).reason;
    assert.ok(isShardflakeError(error, 'DEADLOCK'), String(error));
    assert.equal(error.sqlState, '40P01');
    assert.match(error.message, /deadlock across servers a, b/);
    assert.ok(brokenAfter < 2000, `broken ${Math.round(brokenAfter)} ms after the cycle closed`);
    // T1 moved 10 from a to b; T2 (a → b's opposite) left nothing: not its debit on b, not its credit on a.
    assert.deepEqual(await balances(), [90n, 110n, 100n]);
    const [event] = deadlockEvents();
    assert.ok(event, 'a deadlock event');
    assert.equal(deadlockEvents().length, 1, 'one victim');
    assert.deepEqual(event.servers, ['a', 'b']);
    assert.equal(event.transactions.length, 2);
    assert.equal(event.victim, event.transactions[1], 'the youngest (listed oldest first)');
    assert.ok(event.waitedMs >= 900 && event.waitedMs < 2000, `waited ${event.waitedMs} ms`);
    // cluster status keeps it (the victim's router records it on the catalog, after the fact).
    await until(
      async () => (await clusterStatus(config)).deadlocks.lastDay >= 1,
      10_000,
      'status to list it',
    );
    const status = await clusterStatus(config);
    assert.equal(status.deadlocks.latest[0]?.victim, event.victim);
    assert.deepEqual(status.deadlocks.latest[0]?.servers, ['a', 'b']);
    // The text of `cluster status` shows it as docs/operations.md does (dates, txids and counts aside).
    const shape = (text: string) =>
      text
        .split('\n')
        .filter((l) => /deadlocks across servers|: victim /.test(l))
        .map((l) =>
          l
            .replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/g, 'DATE')
            .replace(/\b[0-9a-z]{20}\b/g, 'TXID')
            .replace(/\d+/g, 'N'),
        );
    const [documented] = pageBlocks('docs/operations.md', ['text deadlocks']);
    assert.deepEqual(shape(formatStatus(status, false)), shape(documented?.code ?? ''));
  });

  it('three transfers around three servers (a → b, b → c, c → a): one victim, the youngest; the other two commit', async () => {
    await setBalances(100n);
    events.length = 0;
    const gate = barrier(3);
    const sent: number[] = [];
    const [t1, t2, t3] = await startInOrder([
      () => transfer(0, 1, gate, sent),
      () => transfer(1, 2, gate, sent),
      () => transfer(2, 0, gate, sent),
    ]);
    const outcome = await Promise.allSettled([t1?.done, t2?.done, t3?.done]);
    const brokenAfter = performance.now() - Math.max(...sent.slice(0, 3));
    assert.deepEqual(
      outcome.map((o) => o.status),
      ['fulfilled', 'fulfilled', 'rejected'],
    );
    assert.ok(isShardflakeError((outcome[2] as PromiseRejectedResult).reason, 'DEADLOCK'));
    assert.ok(brokenAfter < 2500, `broken ${Math.round(brokenAfter)} ms after the cycle closed`);
    // a → b and b → c committed; c → a left nothing.
    assert.deepEqual(await balances(), [90n, 100n, 110n]);
    const found = deadlockEvents();
    assert.equal(found.length, 1);
    assert.deepEqual(found[0]?.servers, ['a', 'b', 'c']);
    assert.equal(found[0]?.transactions.length, 3);
  });

  it('with retry: { attempts: 3 } the victim runs again and both transfers commit', async () => {
    await setBalances(100n);
    events.length = 0;
    const gate = barrier(2);
    const sent: number[] = [];
    const retry = { retry: { attempts: 3 } };
    const [older, younger] = await startInOrder([
      () => transfer(0, 1, gate, sent, retry),
      () => transfer(1, 0, gate, sent, retry),
    ]);
    await Promise.all([older?.done, younger?.done]);
    assert.deepEqual([older?.runs(), younger?.runs()], [1, 2], 'the younger ran twice');
    assert.deepEqual(await balances(), [100n, 100n, 100n], 'both transfers, once each');
    const retries = events.filter((e) => e.type === 'retry');
    assert.deepEqual(
      retries.map((e) => e.type === 'retry' && e.reason),
      ['deadlock'],
    );
  });

  it('retry options of the wrong kind are one INVALID_ARGUMENT line, and nothing runs', async () => {
    let ran = false;
    const fn = async () => {
      ran = true;
    };
    for (const [options, pattern] of [
      [{ retry: { attempts: 0 } }, /retry.attempts must be a whole number of at least 1/],
      [{ retry: {} }, /retry.attempts is required/],
      [{ retry: 3 }, /retry must be an object/],
      [{ retry: { attempts: 2, backoffMs: -1 } }, /retry.backoffMs/],
    ] as const) {
      await assert.rejects(
        router.withShards([{ shard: 0 }], fn, options as never),
        (e: unknown) => isShardflakeError(e, 'INVALID_ARGUMENT') && pattern.test((e as Error).message),
      );
    }
    assert.equal(ran, false);
  });
});

describe('waits that are no cycle end at their bound, with a typed error', () => {
  it('a session left idle in its transaction: its waiter fails with LOCK_TIMEOUT, and the idle one is ended by its server with IDLE_TIMEOUT; nothing of either commits', async () => {
    await setBalances(100n);
    const bounded = await createRouter(config, {
      listen: false,
      transactions: { recovery: false, lockTimeoutMs: 500, idleTimeoutMs: 1500 },
    });
    try {
      const holding = signal();
      const release = signal();
      // The holder locks x on a and b, then its callback awaits something that never comes in time: its
      // sessions sit idle in the transaction, holding the rows (a router that stopped, as its servers see it).
      const holder = bounded.withShards([{ shard: 0 }, { shard: 1 }], async ([x, y]) => {
        await (x as ShardSession).query(ADD, [-1]);
        await (y as ShardSession).query(ADD, [1]);
        holding.fire();
        await release.fired;
        await (x as ShardSession).query(ADD, [-1]);
      });
      holder.catch(() => {});
      await holding.fired;
      const started = performance.now();
      const waiter = bounded.withShards([{ shard: 0 }, { shard: 2 }], async ([x, y]) => {
        await (y as ShardSession).query(ADD, [5]);
        await (x as ShardSession).query(ADD, [-5]);
      });
      const waited = await waiter.then(
        () => assert.fail('the waiter committed'),
        (e: unknown) => e,
      );
      const waitedMs = performance.now() - started;
      assert.ok(isShardflakeError(waited, 'LOCK_TIMEOUT'), String(waited));
      assert.equal((waited as { sqlState?: string }).sqlState, '55P03');
      assert.ok(waitedMs >= 450 && waitedMs < 1500, `waited ${Math.round(waitedMs)} ms`);
      // The holder's sessions are ended by their servers after 1.5 s idle; its callback's next statement (and so
      // its withShards) is IDLE_TIMEOUT.
      await until(
        async () => {
          const idle = await sessionsOf(urls.a, 'idle in transaction');
          return idle === 0;
        },
        10_000,
        'the idle session to be ended',
      );
      release.fire();
      await assert.rejects(
        holder,
        (e: unknown) => isShardflakeError(e, 'IDLE_TIMEOUT') && /server (a|b)/.test((e as Error).message),
      );
      assert.deepEqual(await balances(), [100n, 100n, 100n]);
    } finally {
      await bounded.close();
    }
  });

  it('a wait on a prepared transaction is never broken by cancelling anyone: the waiter ends at lock_timeout, and the prepared transaction stays for recovery', async () => {
    await setBalances(100n);
    events.length = 0;
    // A prepared transaction holding x on a (a coordinator that died between PREPARE and its decision).
    const direct = await connect(urls.a);
    try {
      await direct.query('BEGIN');
      await direct.query(
        `UPDATE ${router.placement(0).schema}.accounts SET balance = balance + 1000 WHERE name = 'x'`,
      );
      await direct.query(`PREPARE TRANSACTION 'test-held-by-a-prepared-transaction'`);
      const slow = await createRouter(config, {
        listen: false,
        onEvent: (e) => events.push(e),
        transactions: { recovery: false, lockTimeoutMs: 2500 },
      });
      try {
        // Younger than anything around, waiting on the prepared transaction at a for longer than the detector's
        // first look (1 s): the detector reads the graph (a wait whose blocker is pid 0) and finds no cycle.
        const waiter = slow.withShards([{ shard: 1 }, { shard: 0 }], async ([y, x]) => {
          await (y as ShardSession).query(ADD, [1]);
          await (x as ShardSession).query(ADD, [-1]);
        });
        await assert.rejects(waiter, (e: unknown) => isShardflakeError(e, 'LOCK_TIMEOUT'));
      } finally {
        await slow.close();
      }
      assert.equal(deadlockEvents().length, 0, 'no deadlock, no victim');
      const { rows } = await direct.query(
        `SELECT gid FROM pg_prepared_xacts WHERE gid = 'test-held-by-a-prepared-transaction'`,
      );
      assert.equal(rows.length, 1, 'the prepared transaction is still there');
      await direct.query(`COMMIT PREPARED 'test-held-by-a-prepared-transaction'`);
      assert.deepEqual(await balances(), [1100n, 100n, 100n]);
    } finally {
      await direct.query(`ROLLBACK PREPARED 'test-held-by-a-prepared-transaction'`).catch(() => {});
      await direct.end();
    }
  });
});

describe('the cancel cannot reach an innocent statement of a pooled connection', () => {
  it("names the victim's tag: a connection whose tagged transaction has ended runs its next statement uncancelled, while one still in it is cancelled", async () => {
    const pooled = await connect(urls.b);
    const detector = await connect(urls.b);
    try {
      const ended = formatTag({ txid: 'endedtx', born: 1 });
      const running = formatTag({ txid: 'runningtx', born: 2 });
      // The victim's transaction ended (its tag reverted with it); the connection went on to another statement.
      await pooled.query(`BEGIN; SELECT set_config('application_name', '${ended}', true); COMMIT`);
      const innocent = pooled.query('SELECT pg_sleep(1.5)').then(
        () => 'ran',
        (e: { code?: string }) => `failed with ${e.code}`,
      );
      await until(async () => (await runningNow(urls.b, 'SELECT pg_sleep(1.5)')) === 1, 5000, 'the sleep');
      const missed = await detector.query(CANCEL_TAGGED_SQL, [ended]);
      assert.equal(missed.rows[0]?.cancelled, 0);
      assert.equal(await innocent, 'ran');
      // Still in the tagged transaction: cancelled.
      await pooled.query(`BEGIN; SELECT set_config('application_name', '${running}', true)`);
      // Its failure is expected before the cancel's own answer may arrive: the check is attached at once, or the
      // rejection would count as unhandled while the detector's answer is awaited (how this test flaked under load).
      const victim = assert.rejects(
        pooled.query('SELECT pg_sleep(30)'),
        (e: { code?: string }) => e.code === '57014',
      );
      await until(async () => (await runningNow(urls.b, 'SELECT pg_sleep(30)')) === 1, 5000, 'the sleep');
      const hit = await detector.query(CANCEL_TAGGED_SQL, [running]);
      assert.equal(hit.rows[0]?.cancelled, 1);
      await victim;
      await pooled.query('ROLLBACK');
    } finally {
      await pooled.end();
      await detector.end();
    }
  });

  it('a cancel that finds the backend idle is dropped by PostgreSQL: the next statement runs', async () => {
    const pooled = await connect(urls.b);
    const detector = await connect(urls.b);
    try {
      const pid = (await pooled.query('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
      const { rows } = await detector.query('SELECT pg_cancel_backend($1) AS sent', [pid]);
      assert.equal(rows[0]?.sent, true);
      // The signal was delivered before this statement was even sent (pg_cancel_backend returned).
      const after = await pooled.query('SELECT 1 AS one');
      assert.equal(after.rows[0]?.one, 1);
    } finally {
      await pooled.end();
      await detector.end();
    }
  });
});

/** How many sessions of transactions across shards are in `state` on a server. */
async function sessionsOf(url: string, state: string): Promise<number> {
  const client = await connect(url);
  try {
    const { rows } = await client.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = $1 AND application_name LIKE 'shardflake tx %'`,
      [state],
    );
    return (rows[0] as { n: number }).n;
  } finally {
    await client.end();
  }
}

/** How many sessions on a server are running exactly `statement`. */
async function runningNow(url: string, statement: string): Promise<number> {
  const client = await connect(url);
  try {
    const { rows } = await client.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query = $1`,
      [statement],
    );
    return (rows[0] as { n: number }).n;
  } finally {
    await client.end();
  }
}

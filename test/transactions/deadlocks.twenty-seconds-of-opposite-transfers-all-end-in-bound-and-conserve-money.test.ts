import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { createRouter, isShardflakeError, type Router, type ShardSession } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { sqlRows, useServers } from '../support/postgres.js';

// The reproduction of issue 29, run for 20 s: writers moving money both ways between a few hot accounts on two
// servers. On main it hung within the first second, for ever. Here every call ends within the bound, deadlocks
// are broken as they form, and no money appears or vanishes.
const [a, b] = await useServers(2);
const config = validateConfig(
  {
    servers: { a: a?.url as string, b: b?.url as string },
    catalog: 'a',
    logicalShards: 2, // shard 0 on a, shard 1 on b
    epoch: '2024-01-01T00:00:00Z',
    tables: { accounts: 'CREATE TABLE accounts (name text PRIMARY KEY, balance bigint NOT NULL)' },
  },
  'test-config',
);
const ACCOUNTS = ['h0', 'h1', 'h2'];
const START = 1_000_000n;
const RUN_MS = 20_000;
const WRITERS = 6;
/** lock_timeout of this router: no call may wait longer, so none may take much longer. */
const LOCK_TIMEOUT_MS = 5000;
const BOUND_MS = LOCK_TIMEOUT_MS + 1500;
let router: Router;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, {
    poolSize: WRITERS,
    transactions: { recovery: false, lockTimeoutMs: LOCK_TIMEOUT_MS },
  });
  for (const shard of [0, 1])
    await router.withShard({ shard }, (s) =>
      s.query('INSERT INTO accounts SELECT unnest($1::text[]), $2', [ACCOUNTS, START]),
    );
});
after(async () => {
  await router?.close();
});

async function total(): Promise<bigint> {
  let sum = 0n;
  for (const shard of [0, 1])
    sum += await router.withShard({ shard }, async (s) => {
      const { rows } = await s.query<{ sum: bigint }>('SELECT sum(balance)::bigint AS sum FROM accounts');
      return BigInt(rows[0]?.sum ?? 0n);
    });
  return sum;
}

it(`${WRITERS} writers moving money both ways between ${ACCOUNTS.length} hot accounts on each of two servers for ${RUN_MS / 1000} s: every call ends within ${BOUND_MS} ms, and the total is conserved`, async () => {
  const before = await total();
  const outcomes = new Map<string, number>();
  const durations: number[] = [];
  const until = performance.now() + RUN_MS;
  const pick = () => ACCOUNTS[Math.floor(Math.random() * ACCOUNTS.length)] as string;
  await Promise.all(
    Array.from({ length: WRITERS }, async (_, writer) => {
      while (performance.now() < until) {
        // Debit first, credit second, in whichever direction: a → b writes a then b, b → a writes b then a.
        const [from, to] = Math.random() < 0.5 ? [0, 1] : [1, 0];
        const [payer, payee] = [pick(), pick()];
        const amount = 1 + Math.floor(Math.random() * 5);
        const started = performance.now();
        // Half the writers let withShards run a deadlock's victim again.
        const options = writer % 2 === 0 ? { retry: { attempts: 4 } } : undefined;
        const outcome = await router
          .withShards(
            [{ shard: from }, { shard: to }],
            async ([x, y]) => {
              await (x as ShardSession).query('UPDATE accounts SET balance = balance - $2 WHERE name = $1', [
                payer,
                amount,
              ]);
              await (y as ShardSession).query('UPDATE accounts SET balance = balance + $2 WHERE name = $1', [
                payee,
                amount,
              ]);
            },
            options,
          )
          .then(
            () => 'committed',
            (e: unknown) => (isShardflakeError(e) ? e.code : String(e)),
          );
        durations.push(performance.now() - started);
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      }
    }),
  );
  const longest = Math.max(...durations);
  const summary = `${JSON.stringify(Object.fromEntries(outcomes))}, longest call ${Math.round(longest)} ms`;
  assert.ok(longest < BOUND_MS, summary);
  assert.ok((outcomes.get('committed') ?? 0) > 100, `transfers went through: ${summary}`);
  const failures = [...outcomes.keys()].filter((k) => k !== 'committed');
  assert.deepEqual(
    failures.filter((k) => k !== 'DEADLOCK' && k !== 'LOCK_TIMEOUT'),
    [],
    `only deadlock victims and lock timeouts may fail: ${summary}`,
  );
  assert.equal(await total(), before, `money conserved: ${summary}`);
  // Nothing is left behind: no session still in a transaction, nothing prepared.
  for (const server of [a, b]) {
    const [left] = await sqlRows<{ n: number }>(
      server?.url as string,
      `SELECT (SELECT count(*) FROM pg_prepared_xacts)::int
        + (SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%')::int AS n`,
    );
    assert.equal(left?.n, 0);
  }
  console.log(`# ${summary}`);
});

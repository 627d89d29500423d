import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/cluster/init.js';
import { testConfig } from '../cluster/cluster-config.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';

/**
 * router.sql with reference tables (config `referenceTables`, one copy on every server), on two servers with 4
 * shards: a sharded table joined with a reference table — inner, or left with the sharded table kept — is
 * answered in every shard against the local copy and combined as usual, the same answer as the rows computed
 * here; a query of the reference table alone, or an outer join keeping the reference table's unmatched rows (which
 * every shard would return again), is refused with UNSUPPORTED_QUERY.
 */
const servers = await useServers(2);
const [a, b] = servers;
const config = testConfig(servers, {
  logicalShards: 4,
  tables: {
    orders:
      'CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT next_id(), country text NOT NULL, amount int NOT NULL)',
  },
  referenceTables: { countries: 'CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL)' },
});
let router: Router;
const orders: { id: bigint; country: string; amount: number }[] = [];
const names: Record<string, string> = { de: 'Germany', fr: 'France', jp: 'Japan' };

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { listen: false, transactions: { recovery: false } });
  await router.withReference(async (s) => {
    for (const [code, name] of Object.entries(names))
      await s.query('INSERT INTO countries (code, name) VALUES ($1, $2)', [code, name]);
  });
  const countries = ['de', 'fr', 'jp', 'xx'];
  for (let i = 0; i < 24; i++) {
    const row = { country: countries[i % 4] as string, amount: 10 + i };
    orders.push({ id: await router.insert('orders', row, { shard: i % 4 }), ...row });
  }
});
after(async () => {
  await router?.close();
});

describe('router.sql with reference tables', () => {
  it('a grouped inner join with a reference table answers as the rows say', async () => {
    const { rows } = await router.sql(
      'SELECT c.name, count(*) AS n, sum(o.amount) AS total FROM orders o JOIN countries c ON c.code = o.country WHERE o.amount > $1 GROUP BY c.name ORDER BY c.name',
      [12],
    );
    const expected = new Map<string, { n: number; total: number }>();
    for (const o of orders) {
      const name = names[o.country];
      if (!name || o.amount <= 12) continue;
      const g = expected.get(name) ?? { n: 0, total: 0 };
      g.n++;
      g.total += o.amount;
      expected.set(name, g);
    }
    assert.deepEqual(
      rows.map((r) => [r.name, Number(r.n), Number(r.total)]),
      [...expected].sort(([x], [y]) => (x < y ? -1 : 1)).map(([name, g]) => [name, g.n, g.total]),
    );
  });

  it('a left join keeping the sharded rows gives every order once, unmatched ones with NULL', async () => {
    const { rows } = await router.sql(
      'SELECT o.id, c.name FROM orders o LEFT JOIN countries c ON c.code = o.country ORDER BY o.id',
    );
    assert.deepEqual(
      rows.map((r) => [r.id, r.name]),
      [...orders].sort((x, y) => (x.id < y.id ? -1 : 1)).map((o) => [o.id, names[o.country] ?? null]),
    );
  });

  it('refuses the reference table alone and an outer join that keeps its unmatched rows', async () => {
    for (const text of [
      'SELECT * FROM countries',
      'SELECT c.name, o.id FROM countries c LEFT JOIN orders o ON o.country = c.code',
      'SELECT c.name, o.id FROM orders o FULL JOIN countries c ON o.country = c.code',
    ])
      await assert.rejects(router.sql(text), (e: unknown) => isShardflakeError(e, 'UNSUPPORTED_QUERY'), text);
  });
});

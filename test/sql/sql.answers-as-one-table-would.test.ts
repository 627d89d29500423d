import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import type { Row } from 'shardflake';
import { type SqlFixture, sqlFixture } from './fixture.js';

/**
 * The exactness proof: router.sql over 8 shards on 2 servers gives the answer PostgreSQL gives for the same query
 * on one plain table holding the same rows — for fixed queries covering each feature, and for queries fast-check
 * generates (WHERE, joins, GROUP BY, every combinable aggregate with FILTER and count(DISTINCT), HAVING, ORDER BY
 * on columns and aggregates, LIMIT/OFFSET, DISTINCT), compared as lists when the order is total and as multisets
 * otherwise. Also through the stream form.
 */
const f: SqlFixture = await sqlFixture();
after(async () => {
  await f?.router.close();
  await f?.plain.end();
});

const show = (rows: Row[]) =>
  rows.map((r) =>
    JSON.stringify(r, (_, v) => (typeof v === 'bigint' ? `${v}n` : v instanceof Date ? v.toISOString() : v)),
  );

async function same(text: string, values: unknown[] = [], ordered = false): Promise<void> {
  const expected = (await f.plain.query(text, values)).rows as Row[];
  const got = (
    await f.router.sql(text, values).catch((e) => Promise.reject(new Error(`sql: ${text}: ${e.message}`)))
  ).rows;
  const streamed: Row[] = [];
  try {
    for await (const row of f.router.sqlStream(text, values, { batchSize: 7 })) streamed.push(row);
  } catch (e) {
    throw new Error(`sqlStream: ${text}: ${(e as Error).message}`);
  }
  const [e, g, s] = [show(expected), show(got), show(streamed)];
  if (!ordered) for (const list of [e, g, s]) list.sort();
  assert.deepEqual(g, e, `router.sql differs from one table for: ${text} ${JSON.stringify(values)}`);
  assert.deepEqual(s, e, `router.sqlStream differs from one table for: ${text}`);
}

describe('router.sql answers as one table would', () => {
  it('fixed queries, one per feature', async () => {
    await same('SELECT * FROM users');
    await same('SELECT id, country FROM users WHERE age > $1 ORDER BY id DESC LIMIT 10 OFFSET 3', [30], true);
    await same('SELECT country, age FROM users ORDER BY country NULLS FIRST, age DESC, id', [], true);
    await same('SELECT DISTINCT country FROM users');
    await same('SELECT count(*) FROM users WHERE age > 1000');
    await same('SELECT count(*), count(age), sum(age), min(age), max(age), avg(age) FROM users');
    await same('SELECT sum(big), avg(big), sum(score), avg(score), min(score), max(score) FROM users');
    await same(
      'SELECT sum(ratio), max(ratio), bool_and(active), bool_or(active), every(active) FROM users WHERE id < 0',
    );
    await same('SELECT bool_and(active), bool_or(active) FROM users');
    await same(
      'SELECT country, count(*) FILTER (WHERE age > 30) AS older, count(DISTINCT age), avg(score) FROM users GROUP BY country',
    );
    await same(
      'SELECT country, count(*) AS n FROM users GROUP BY 1 HAVING count(*) > $1 AND min(age) IS NOT NULL ORDER BY n DESC, country LIMIT 3',
      [2],
      true,
    );
    await same(
      'SELECT age % 3 AS bucket, max(country) FROM users GROUP BY age % 3 ORDER BY 1 NULLS FIRST',
      [],
      true,
    );
    await same(
      'SELECT u.country, count(p.id), sum(p.likes) FROM users u JOIN photos p ON p.user_id = u.id WHERE p.likes > 0 GROUP BY u.country ORDER BY u.country',
      [],
      true,
    );
    await same(
      'SELECT u.id, p.caption FROM users u LEFT JOIN photos p ON u.id = p.user_id ORDER BY p.caption, u.id',
      [],
      true,
    );
    await same('SELECT DISTINCT country, count(*) FROM users GROUP BY country, age ORDER BY 1, 2', [], true);
    await same(
      'SELECT max(age) FROM users GROUP BY country ORDER BY max(age) DESC NULLS LAST, min(id) LIMIT 2 OFFSET 1',
      [],
      true,
    );
  });
});

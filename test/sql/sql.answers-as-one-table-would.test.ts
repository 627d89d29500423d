import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import { type SqlFixture, sameAsOneTable, sqlFixture } from './fixture.js';

/**
 * The exactness proof: router.sql over 8 shards on 2 servers gives the answer PostgreSQL gives for the same query
 * on one plain table holding the same rows — for fixed queries covering each feature, and for queries fast-check
 * generates (WHERE, joins, GROUP BY, every combinable aggregate with FILTER and count(DISTINCT), HAVING, ORDER BY
 * on columns and aggregates, LIMIT/OFFSET, DISTINCT), compared as lists when the order is total and as multisets
 * otherwise. Also through the stream form, and through a second router that cuts each server's shards into
 * statements of 2 (`sqlShardsPerStatement`), whose pieces' answers are combined as servers' answers are.
 */
const f: SqlFixture = await sqlFixture(8, 120, { split: true });
after(async () => {
  await f?.router.close();
  await f?.split?.close();
  await f?.plain.end();
});

const same = (text: string, values: unknown[] = [], ordered = false) =>
  sameAsOneTable(f, text, values, ordered);

describe('router.sql answers as one table would', () => {
  it('fixed queries, one per feature', async () => {
    await same('SELECT * FROM users');
    await same('SELECT id, country FROM users WHERE age > $1 ORDER BY id DESC LIMIT 10 OFFSET 3', [30], true);
    await same('SELECT country, age FROM users ORDER BY country NULLS FIRST, age DESC, id', [], true);
    await same('SELECT DISTINCT country FROM users');
    // found by the property test: rows repeated across a server's shards must not fill its LIMIT
    await same('SELECT DISTINCT ratio FROM users ORDER BY ratio LIMIT 1 OFFSET $1', [1], true);
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

  it('joins with a reference table, and a reference table alone (answered once, not once per shard)', async () => {
    await same('SELECT u.id, c.name FROM users u JOIN countries c ON c.code = u.country');
    await same(
      'SELECT u.id, u.country, c.region FROM users u LEFT JOIN countries c ON u.country = c.code ORDER BY u.id DESC LIMIT 25',
      [],
      true,
    );
    await same(
      'SELECT c.region, count(*), avg(u.age), count(DISTINCT u.country) FROM users u JOIN countries c ON c.code = u.country GROUP BY c.region HAVING count(*) > $1 ORDER BY c.region NULLS FIRST',
      [1],
      true,
    );
    await same(
      'SELECT c.name, sum(p.likes) AS likes FROM countries c RIGHT JOIN users u ON u.country = c.code JOIN photos p ON p.user_id = u.id GROUP BY c.name ORDER BY likes DESC NULLS LAST, 1',
      [],
      true,
    );
    await same(
      'SELECT DISTINCT c.region FROM users u JOIN countries c ON c.code = u.country WHERE u.age > 30',
    );
    await same('SELECT * FROM countries');
    await same('SELECT count(*), min(name), count(region) FROM countries');
    // nothing is combined in the router, so an expression over aggregates is answered here
    await same('SELECT count(region)::int * 2 AS twice, max(name) || min(code) AS mixed FROM countries');
    await same('SELECT region, count(*) FROM countries GROUP BY region ORDER BY 2 DESC, 1', [], true);
    await same(
      'SELECT a.code, b.code FROM countries a JOIN countries b ON a.region = b.region ORDER BY 1, 2',
      [],
      true,
    );
    await same('SELECT name FROM countries WHERE code > $1 ORDER BY code LIMIT 2 OFFSET 1', ['br'], true);
  });

  it('generated queries (fast-check)', async () => {
    const columns = ['id', 'country', 'age', 'score', 'active', 'big', 'ratio'];
    const predicates: [string, unknown[]][] = [
      ['age > $1', [40]],
      ['country = $1', ['fr']],
      ['age IS NULL', []],
      ['score >= 2', []],
      ['active', []],
      ["country IN ('fr', 'jp') OR big > $1", [50_000_000_000_000n]],
      ['age BETWEEN $1 AND $2', [20, 45]],
      ['NOT active AND ratio < 1.5', []],
    ];
    const where = fc.option(fc.constantFrom(...predicates), { nil: undefined });
    const direction = fc.constantFrom('', ' DESC', ' NULLS FIRST', ' DESC NULLS LAST');
    const rowsQuery = fc
      .record({
        cols: fc.subarray(columns, { minLength: 1 }),
        star: fc.boolean(),
        distinct: fc.boolean(),
        where,
        order: fc.subarray(columns),
        dirs: fc.array(direction, { minLength: 8, maxLength: 8 }),
        limit: fc.option(fc.integer({ min: 0, max: 30 }), { nil: undefined }),
        offset: fc.option(fc.integer({ min: 0, max: 20 }), { nil: undefined }),
        paramLimit: fc.boolean(),
      })
      .map((q) => {
        const values = [...(q.where?.[1] ?? [])];
        const selected = q.star && !q.distinct ? ['*'] : q.cols;
        const visible = q.star && !q.distinct ? columns : q.cols;
        // a total order: DISTINCT rows by every selected column, other rows ending with the unique id
        const orderCols = q.distinct
          ? [...q.order.filter((c) => visible.includes(c)), ...visible]
          : [...q.order, 'id'];
        const unique = [...new Set(orderCols)];
        const ordered = q.limit !== undefined || q.order.length > 0;
        let text = `SELECT ${q.distinct ? 'DISTINCT ' : ''}${selected.join(', ')} FROM users`;
        if (q.where) text += ` WHERE ${q.where[0]}`;
        if (ordered) text += ` ORDER BY ${unique.map((c, i) => `${c}${q.dirs[i] ?? ''}`).join(', ')}`;
        if (q.limit !== undefined) {
          if (q.paramLimit) {
            values.push(q.limit);
            text += ` LIMIT $${values.length}`;
          } else text += ` LIMIT ${q.limit}`;
          if (q.offset !== undefined) {
            values.push(q.offset);
            text += ` OFFSET $${values.length}`;
          }
        }
        return { text, values, ordered };
      });
    const aggregates = [
      'count(*)',
      'count(age)',
      'sum(age)',
      'avg(age)',
      'min(age)',
      'max(age)',
      'sum(score)',
      'avg(score)',
      'min(score)',
      'max(score)',
      'sum(big)',
      'avg(big)',
      'bool_and(active)',
      'bool_or(active)',
      'count(DISTINCT age)',
      'count(DISTINCT country)',
      'count(DISTINCT score)',
      'min(country)',
      'max(country)',
      'sum(ratio)',
      'max(ratio)',
      'avg(ratio)',
    ];
    const havings: [string, unknown[]][] = [
      ['count(*) > 2', []],
      ['sum(age) >= $1', [100]],
      ['min(age) IS NOT NULL', []],
      ['max(score) < 5 OR count(*) = 1', []],
      ["NOT (max(country) = 'jp')", []],
    ];
    const groupsQuery = fc
      .record({
        keys: fc.subarray(['country', 'age % 3', 'active'], { maxLength: 2 }),
        aggs: fc.subarray(aggregates, { minLength: 1, maxLength: 4 }),
        filters: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
        where,
        having: fc.option(fc.constantFrom(...havings), { nil: undefined }),
        orderByAggregate: fc.boolean(),
        dirs: fc.array(direction, { minLength: 4, maxLength: 4 }),
        limit: fc.option(fc.integer({ min: 0, max: 5 }), { nil: undefined }),
        offset: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined }),
        distinct: fc.boolean(),
      })
      .map((q) => {
        const values = [...(q.where?.[1] ?? [])];
        const aggs = q.aggs.map((a, i) => (q.filters[i] ? `${a} FILTER (WHERE age > 30)` : a));
        let text = `SELECT ${q.distinct ? 'DISTINCT ' : ''}${[...q.keys, ...aggs].join(', ')} FROM users`;
        if (q.where) text += ` WHERE ${q.where[0]}`;
        if (q.keys.length > 0) text += ` GROUP BY ${q.keys.join(', ')}`;
        if (q.having) {
          const shift = values.length;
          text += ` HAVING ${q.having[0].replace(/\$(\d)/g, (_, n) => `$${Number(n) + shift}`)}`;
          values.push(...q.having[1]);
        }
        // a total order over the groups: every key (positions), after an aggregate when asked
        const order = q.keys.map((_, i) => `${i + 1}${q.dirs[i] ?? ''}`);
        if (q.orderByAggregate) order.unshift(`${q.aggs[0]}${q.dirs[3]}`);
        const ordered = q.limit !== undefined || q.orderByAggregate;
        if (ordered && order.length > 0 && !q.distinct) text += ` ORDER BY ${order.join(', ')}`;
        if (q.limit !== undefined && (q.keys.length === 0 || !q.distinct))
          text += ` LIMIT ${q.limit} OFFSET ${q.offset ?? 0}`;
        return { text, values, ordered: ordered && !q.distinct };
      });
    // A reference table joined to the sharded rows on any condition (not an id): each shard has all of it.
    const referenceQuery = fc
      .record({
        agg: fc.constantFrom(
          'count(*)',
          'sum(u.age)',
          'min(c.name)',
          'count(DISTINCT u.age)',
          'avg(u.score)',
        ),
        key: fc.constantFrom('c.region', 'c.name', 'u.active'),
        left: fc.boolean(),
        where,
      })
      .map((q) => ({
        text: `SELECT ${q.key}, ${q.agg} FROM users u ${q.left ? 'LEFT ' : ''}JOIN countries c ON c.code = u.country${q.where ? ` WHERE ${q.where[0]}` : ''} GROUP BY ${q.key} ORDER BY 1`,
        values: [...(q.where?.[1] ?? [])],
        ordered: true,
      }));
    const joinQuery = fc
      .record({
        agg: fc.constantFrom(
          'count(*)',
          'sum(p.likes)',
          'max(p.caption)',
          'avg(p.likes)',
          'count(DISTINCT p.likes)',
        ),
        key: fc.constantFrom('u.country', 'u.active', 'p.likes % 2'),
        left: fc.boolean(),
      })
      .map((q) => ({
        text: `SELECT ${q.key}, ${q.agg} FROM users u ${q.left ? 'LEFT ' : ''}JOIN photos p ON p.user_id = u.id GROUP BY ${q.key} ORDER BY 1`,
        values: [] as unknown[],
        ordered: true,
      }));
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(rowsQuery, groupsQuery, joinQuery, referenceQuery),
        async ({ text, values, ordered }) => {
          await same(text, values, ordered);
        },
      ),
      { numRuns: 150 },
    );
  });
});

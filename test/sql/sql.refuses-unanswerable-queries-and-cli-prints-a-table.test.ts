import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type RouterEvent } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { testConfig } from '../cluster/cluster-config.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { REFERENCE, TABLES } from './fixture.js';

/**
 * Every query router.sql cannot answer exactly is refused with UNSUPPORTED_QUERY naming what, before any statement
 * reaches a server (no operation event, the rows unchanged); a syntax error is INVALID_ARGUMENT. The CLI
 * `cluster sql` prints the answer as psql would (or JSON), and a refusal as one stderr line with exit code 2.
 */
const servers = await useServers(2);
const config = testConfig(servers, { logicalShards: 4, tables: TABLES, referenceTables: REFERENCE });
await initCluster(config);
const events: RouterEvent[] = [];
const router = await createRouter(config, { onEvent: (e) => events.push(e) });
await router.insertMany('users', [{ country: 'fr' }, { country: 'jp' }], { key: (_, i) => i });
after(() => router.close());

const REFUSED: [string, RegExp][] = [
  [
    'SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY age) FROM users',
    /ordered-set aggregate percentile_cont/,
  ],
  ["SELECT string_agg(country, ',') FROM users", /aggregate string_agg/],
  ['SELECT stddev(age) FROM users', /aggregate stddev/],
  ['SELECT id, row_number() OVER (ORDER BY id) FROM users', /window function row_number/],
  ['SELECT id FROM users UNION SELECT id FROM photos', /UNION \(set operations across shards\)/],
  ['SELECT id FROM users EXCEPT SELECT user_id FROM photos', /EXCEPT/],
  ['SELECT * FROM users WHERE id IN (SELECT user_id FROM photos)', /subquery in WHERE/],
  ['SELECT * FROM (SELECT * FROM users) AS u', /subquery in FROM/],
  ['WITH u AS (SELECT * FROM users) SELECT * FROM u', /WITH/],
  ["INSERT INTO users (country) VALUES ('xx')", /InsertStmt \(only SELECT/],
  ['UPDATE users SET age = 1', /UpdateStmt/],
  ['DELETE FROM users', /DeleteStmt/],
  ['SELECT * FROM users; DROP TABLE users', /2 statements/],
  ['SELECT * FROM users FOR UPDATE', /FOR UPDATE/],
  ['SELECT * INTO copy FROM users', /SELECT INTO/],
  ['SELECT random() FROM users', /random\(\)/],
  ['SELECT * FROM users WHERE age < now()', /now\(\)/],
  ["SELECT nextval('s') FROM users", /nextval\(\)/],
  ['SELECT CURRENT_TIMESTAMP FROM users', /CURRENT_TIMESTAMP/],
  ['SELECT * FROM users u JOIN photos p ON p.caption = u.country', /join whose condition/],
  ['SELECT * FROM users u, photos p WHERE p.user_id = u.id', /several FROM items/],
  ['SELECT * FROM users NATURAL JOIN photos', /NATURAL JOIN/],
  // A reference table's unmatched rows would come once per shard.
  [
    'SELECT * FROM countries c LEFT JOIN users u ON u.country = c.code',
    /keeps a reference table’s unmatched rows/,
  ],
  [
    'SELECT * FROM users u RIGHT JOIN countries c ON u.country = c.code',
    /keeps a reference table’s unmatched rows/,
  ],
  [
    'SELECT * FROM users u FULL JOIN countries c ON u.country = c.code',
    /keeps a reference table’s unmatched rows/,
  ],
  // An id equated with a reference table's column does not make two sharded tables' rows colocated.
  [
    'SELECT * FROM users u JOIN countries c ON c.code = u.country JOIN photos p ON p.id = c.code',
    /join whose condition/,
  ],
  ['SELECT * FROM public.users', /qualified name/],
  ['SELECT 1', /without FROM/],
  ['SELECT sum(age) / count(*) FROM users', /expression over aggregates/],
  ['SELECT count(*)::int FROM users', /expression over aggregates/],
  ['SELECT sum(DISTINCT age) FROM users', /sum\(DISTINCT/],
  ['SELECT DISTINCT ON (country) country FROM users', /DISTINCT ON/],
  ['SELECT country, count(*) FROM users GROUP BY ROLLUP (country)', /ROLLUP/],
  ['SELECT country FROM users GROUP BY country HAVING count(*) + 1 > 2', /HAVING condition|cannot evaluate/],
  [
    'SELECT country, count(*) FROM users GROUP BY country ORDER BY length(country)',
    /ORDER BY on an expression/,
  ],
  ['SELECT lower(country) AS country, count(*) FROM users GROUP BY country', /names an output column/],
  ['SELECT * FROM users ORDER BY id FETCH FIRST 1 ROWS WITH TIES', /WITH TIES/],
  ['SELECT array_agg(age ORDER BY age) FROM users', /array_agg/],
  ['SELECT * FROM users LIMIT 1 + 1', /LIMIT or OFFSET/],
];

describe('router.sql refuses what it cannot answer exactly', () => {
  it('each refusal is UNSUPPORTED_QUERY saying what, and nothing reaches a server', async () => {
    events.length = 0;
    for (const [text, what] of REFUSED) {
      await assert.rejects(
        router.sql(text),
        (error) => isShardflakeError(error, 'UNSUPPORTED_QUERY') && what.test(error.message),
        text,
      );
    }
    assert.deepEqual(
      events.filter((e) => e.type === 'operation'),
      [],
      'no statement was sent for a refused query',
    );
    const { rows } = await router.sql('SELECT count(*) AS n FROM users');
    assert.deepEqual(rows, [{ n: 2n }], 'the refused writes changed nothing');
  });

  it('a syntax error is INVALID_ARGUMENT, and so are an empty text and a negative LIMIT', async () => {
    await assert.rejects(router.sql('SELEC * FROM users'), (e) => isShardflakeError(e, 'INVALID_ARGUMENT'));
    await assert.rejects(router.sql('  '), (e) => isShardflakeError(e, 'INVALID_ARGUMENT'));
    await assert.rejects(router.sql('SELECT * FROM users LIMIT $1', [-1]), (e) =>
      isShardflakeError(e, 'INVALID_ARGUMENT'),
    );
  });

  it('the stream form refuses the same way, before reading', async () => {
    const read = async () => {
      for await (const _ of router.sqlStream('SELECT id FROM users UNION ALL SELECT id FROM users')) {
        // nothing
      }
    };
    await assert.rejects(read(), (e) => isShardflakeError(e, 'UNSUPPORTED_QUERY'));
  });

  it('values are bind parameters: a hostile value is only a value', async () => {
    const { rows } = await router.sql('SELECT count(*) AS n FROM users WHERE country = $1', [
      "fr'; DROP TABLE users; --",
    ]);
    assert.deepEqual(rows, [{ n: 0n }]);
    assert.equal((await router.sql('SELECT count(*) AS n FROM users')).rows[0]?.n, 2n);
  });

  it('cluster sql prints a table like psql, JSON with --json, and a refusal as one stderr line (exit 2)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'shardflake-sql-cli-'));
    const path = join(dir, 'cluster.json');
    await writeFile(
      path,
      JSON.stringify({
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: 4,
        epoch: '2024-01-01T00:00:00Z',
        tables: TABLES,
      }),
    );
    const table = await startCli([
      'cluster',
      'sql',
      '--config',
      path,
      'SELECT country, count(*) AS n FROM users WHERE country <> $1 GROUP BY country ORDER BY country',
      '--param',
      'de',
    ]).done;
    assert.equal(table.code, 0, table.stderr);
    assert.equal(
      table.stdout,
      [' country | n', '---------+---', ' fr      | 1', ' jp      | 1', '(2 rows)', ''].join('\n'),
    );
    const json = await startCli(['cluster', 'sql', '--config', path, 'SELECT count(*) FROM users', '--json'])
      .done;
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(JSON.parse(json.stdout), {
      columns: [{ name: 'count', type: 20 }],
      rows: [{ count: '2' }],
    });
    const refused = await startCli(['cluster', 'sql', '--config', path, 'SELECT stddev(age) FROM users'])
      .done;
    assert.equal(refused.code, 2);
    assert.equal(refused.stdout, '');
    assert.match(refused.stderr, /^shardflake: error \[UNSUPPORTED_QUERY\]: .*stddev.*\n$/);
  });
});

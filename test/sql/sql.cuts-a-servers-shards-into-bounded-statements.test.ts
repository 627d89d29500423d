import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { createRouter, type Router, type Row } from 'shardflake';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { quoteIdent } from '../../packages/shardflake/src/postgres/identifier.js';
import { type SqlFixture, sqlFixture } from './fixture.js';

/**
 * router.sql cuts each server's shards into statements of at most `sqlShardsPerStatement` shards, runs them over
 * at most `sqlConnectionsPerServer` of the server's connections, and answers as the unsplit router does.
 *
 * The statements are counted by the servers themselves, not by the router: every shard holds a view `probe` of
 * the backend's pid and the statement's start time (`statement_timestamp()`, fixed for a statement), so the rows of
 * one statement, and only those, share a (pid, time) pair; each row also names its shard. (router.sql refuses
 * those functions in a query's text, as their values differ between statements; a view hides them from its check.)
 */
const f: SqlFixture = await sqlFixture(8, 120, { split: true });
const split = f.split as Router;
after(async () => {
  await f?.router.close();
  await f?.split?.close();
  await f?.plain.end();
});

const servers = f.configFile.servers as Record<string, string>;
for (let shard = 0; shard < f.router.logicalShards; shard++) {
  const { server, schema } = f.router.placement(shard);
  const client = await connect(servers[server] as string);
  await client.query(
    `CREATE VIEW ${quoteIdent(schema, 'schema')}.probe AS
       SELECT pg_backend_pid() AS pid, statement_timestamp()::text AS at, ${shard}::int AS shard`,
  );
  await client.end();
}

/** The statements that answered, each as its server and its shards, from the probe's rows. */
function statementsOf(router: Router, rows: Row[]): { server: string; shards: number[]; pid: number }[] {
  const byStatement = new Map<string, { server: string; shards: number[]; pid: number }>();
  for (const row of rows) {
    const shard = row.shard as number;
    const key = `${row.pid} ${row.at}`;
    const statement = byStatement.get(key) ?? {
      server: router.placement(shard).server,
      shards: [],
      pid: row.pid as number,
    };
    statement.shards.push(shard);
    byStatement.set(key, statement);
  }
  return [...byStatement.values()];
}

const shardsOn = (server: string) =>
  Array.from({ length: f.router.logicalShards }, (_, s) => s).filter(
    (s) => f.router.placement(s).server === server,
  );

describe('router.sql in bounded pieces', () => {
  it('the unsplit router reads each server in one statement', async () => {
    const { rows } = await f.router.sql('SELECT pid, at, shard FROM probe');
    const statements = statementsOf(f.router, rows);
    assert.equal(statements.length, Object.keys(servers).length);
    for (const s of statements) assert.deepEqual(s.shards.sort(), shardsOn(s.server));
  });

  it('a router with sqlShardsPerStatement 3 reads each server of 4 shards in 2 statements, every shard once', async () => {
    for (const query of [
      'SELECT pid, at, shard FROM probe',
      'SELECT pid, at, shard FROM probe ORDER BY shard',
    ]) {
      const { rows } = await split.sql(query);
      const statements = statementsOf(split, rows);
      for (const server of Object.keys(servers)) {
        const mine = statements.filter((s) => s.server === server);
        assert.equal(mine.length, 2, `${query}: statements on ${server}`);
        for (const s of mine) assert.ok(s.shards.length <= 3);
        assert.deepEqual(mine.flatMap((s) => s.shards).sort(), shardsOn(server));
        assert.ok(new Set(mine.map((s) => s.pid)).size <= 2, 'at most sqlConnectionsPerServer connections');
      }
    }
  });

  it('the stream is split too, holding at most sqlConnectionsPerServer pieces per server', async () => {
    const rows: Row[] = [];
    for await (const row of split.sqlStream('SELECT pid, at, shard FROM probe ORDER BY shard DESC'))
      rows.push(row);
    assert.deepEqual(
      rows.map((r) => r.shard),
      [7, 6, 5, 4, 3, 2, 1, 0],
    );
    const statements = statementsOf(split, rows);
    for (const server of Object.keys(servers))
      assert.equal(statements.filter((s) => s.server === server).length, 2);
  });

  it('gives the answers of the unsplit router', async () => {
    for (const [text, values] of [
      ['SELECT count(*), sum(age), avg(score), min(country), count(DISTINCT age) FROM users', []],
      ['SELECT country, count(*) FROM users GROUP BY country HAVING count(*) > $1 ORDER BY 2 DESC, 1', [3]],
      ['SELECT id, age FROM users WHERE age > $1 ORDER BY age DESC NULLS LAST, id LIMIT 7 OFFSET 2', [20]],
      ['SELECT DISTINCT country FROM users ORDER BY country NULLS FIRST LIMIT 3', []],
      [
        'SELECT u.country, sum(p.likes) FROM users u JOIN photos p ON p.user_id = u.id GROUP BY 1 ORDER BY 1',
        [],
      ],
    ] as const) {
      const whole = await f.router.sql(text, [...values]);
      const cut = await split.sql(text, [...values]);
      assert.deepEqual(cut, whole, text);
    }
  });

  it('refuses a statement of no shards or no connections with INVALID_ARGUMENT', async () => {
    for (const options of [{ sqlShardsPerStatement: 0 }, { sqlConnectionsPerServer: 1.5 }])
      await assert.rejects(createRouter(f.config, options), { code: 'INVALID_ARGUMENT' });
  });
});

import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { createRouter, type Router, type Row } from 'shardflake';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { quoteIdent } from '../../packages/shardflake/src/postgres/identifier.js';
import { SPLIT_OPTIONS, type SqlFixture, sqlFixture } from './fixture.js';

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

/**
 * A view that tells, from inside the statement that reads it, whether that statement is a named prepared one (its
 * own text, `current_query()`, is among the backend's prepared statements) and how many the backend holds.
 */
const HELD = (schema: string, shard: number, extra = '') =>
  `CREATE OR REPLACE VIEW ${quoteIdent(schema, 'schema')}.held AS
     SELECT ${shard}::int AS shard, pg_backend_pid() AS pid,
            (SELECT count(*)::int FROM pg_prepared_statements WHERE statement = current_query()) AS named,
            (SELECT count(*)::int FROM pg_prepared_statements) AS kept${extra}`;

const servers = f.configFile.servers as Record<string, string>;
for (let shard = 0; shard < f.router.logicalShards; shard++) {
  const { server, schema } = f.router.placement(shard);
  const client = await connect(servers[server] as string);
  await client.query(
    `CREATE VIEW ${quoteIdent(schema, 'schema')}.probe AS
       SELECT pg_backend_pid() AS pid, statement_timestamp()::text AS at, ${shard}::int AS shard`,
  );
  await client.query(HELD(schema, shard));
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

  it('refuses a statement of no shards or no connections, or an unknown sqlPrepare, with INVALID_ARGUMENT', async () => {
    for (const options of [
      { sqlShardsPerStatement: 0 },
      { sqlConnectionsPerServer: 1.5 },
      { sqlPrepare: 'sometimes' as 'auto' },
    ])
      await assert.rejects(createRouter(f.config, options), { code: 'INVALID_ARGUMENT' });
    await assert.rejects(split.sql('SELECT shard FROM held', [], { prepare: 'yes' as unknown as boolean }), {
      code: 'INVALID_ARGUMENT',
      message: /prepare must be a boolean/,
    });
  });
});

describe('prepared pieces (sqlPrepare)', () => {
  const named = (rows: Row[]) => rows.map((r) => r.named);
  const everyPiece = (rows: Row[], value: number) => rows.length > 0 && named(rows).every((n) => n === value);

  it("'auto' sends a text's pieces unnamed on its first call and named from its second", async () => {
    const text = 'SELECT shard, named FROM held WHERE shard >= $1';
    const first = await split.sql(text, [0]);
    assert.equal(first.rows.length, 8);
    assert.ok(everyPiece(first.rows, 0), `first call: ${named(first.rows)}`);
    const second = await split.sql(text, [0]);
    assert.ok(everyPiece(second.rows, 1), `second call: ${named(second.rows)}`);
    // a call's own prepare: false wins (a text of its own: an unnamed statement whose text a named one of the
    // backend has would count as named)
    for (let i = 0; i < 2; i++)
      assert.deepEqual(
        named((await split.sql(`${text} AND shard < 1000`, [0], { prepare: false })).rows),
        Array(8).fill(0),
      );
    // and prepare: true names a text's first call
    assert.ok(everyPiece((await split.sql('SELECT named FROM held WHERE shard < 100')).rows, 0));
    assert.ok(
      everyPiece((await split.sql('SELECT named FROM held WHERE shard < 99', [], { prepare: true })).rows, 1),
    );
  });

  it("'never' and 'always' routers", async () => {
    const never = await createRouter(f.config, { ...SPLIT_OPTIONS, sqlPrepare: 'never' });
    const always = await createRouter(f.config, { ...SPLIT_OPTIONS, sqlPrepare: 'always' });
    try {
      for (let i = 0; i < 3; i++)
        assert.ok(everyPiece((await never.sql('SELECT named FROM held WHERE shard <> 98')).rows, 0));
      assert.ok(everyPiece((await always.sql('SELECT named FROM held WHERE shard <> 97')).rows, 1));
    } finally {
      await never.close();
      await always.close();
    }
  });

  it('each piece settles on one connection of its server, which keeps its statement', async () => {
    const text = 'SELECT shard, pid, named FROM held WHERE shard > $1';
    const pids = new Map<number, Set<number>>();
    for (let call = 0; call < 12; call++) {
      const { rows } = await split.sql(text, [-1]);
      if (call >= 2)
        for (const { shard, pid } of rows) {
          const seen = pids.get(shard as number) ?? new Set();
          pids.set(shard as number, seen.add(pid as number));
        }
      // other work between calls takes the pool's connections in another order
      await Promise.all([
        split.sql('SELECT shard FROM probe WHERE shard IN (1, 2, 5)'),
        split.sql('SELECT count(*) FROM held'),
      ]);
    }
    assert.equal(pids.size, 8);
    for (const [shard, seen] of pids) assert.equal(seen.size, 1, `shard ${shard} ran on ${[...seen]}`);
  });

  it('a connection keeps at most 128 of them, least recently used out first', async () => {
    const router = await createRouter(f.config, { sqlPrepare: 'always', poolSize: 1 });
    try {
      let most = 0;
      for (let i = 0; i < 140; i++) {
        const { rows } = await router.sql(`SELECT kept, named FROM held WHERE shard <> ${1000 + i}`);
        assert.ok(everyPiece(rows, 1));
        most = Math.max(most, ...rows.map((r) => r.kept as number));
      }
      // one connection per server, one statement per call: 140 texts, never more than 128 kept
      assert.equal(most, 128);
      // the most recent ones are still there: no new Parse (the server would refuse a second one of the name)
      for (let i = 139; i > 130; i--)
        assert.ok(
          everyPiece((await router.sql(`SELECT kept, named FROM held WHERE shard <> ${1000 + i}`)).rows, 1),
        );
    } finally {
      await router.close();
    }
  });

  it('a statement kept across DDL that changed its columns is parsed again, not an error', async () => {
    // one connection per server, so the third call runs on the connection that kept the second's statement
    const router = await createRouter(f.config, { poolSize: 1 });
    try {
      const text = 'SELECT * FROM held ORDER BY shard';
      await router.sql(text);
      const second = await router.sql(text);
      assert.deepEqual(Object.keys(second.rows[0] ?? {}), ['shard', 'pid', 'named', 'kept']);
      assert.ok(everyPiece(second.rows, 1));
      for (let shard = 0; shard < f.router.logicalShards; shard++) {
        const { server, schema } = f.router.placement(shard);
        const client = await connect(servers[server] as string);
        await client.query(HELD(schema, shard, ', 7 AS added'));
        await client.end();
      }
      const after = await router.sql(text);
      assert.deepEqual(Object.keys(after.rows[0] ?? {}), ['shard', 'pid', 'named', 'kept', 'added']);
      assert.ok(everyPiece(after.rows, 1));
    } finally {
      await router.close();
    }
  });
});

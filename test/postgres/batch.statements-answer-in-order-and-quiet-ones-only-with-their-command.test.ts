import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { BatchFailure, queryBatch } from '../../packages/shardflake/src/postgres/batch.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { queriesDuring } from '../support/queries.js';

/**
 * postgres/batch.ts on a real server: several statements in one round trip, each answered with its own result in
 * order (rows parsed as the library parses them: int8 as bigint); a quiet statement (not described, its rows
 * dropped) still reports its command and row count and leaves the results after it in their places; a failure
 * names the statement that failed and runs nothing after it.
 */
const [server] = await useServers(1);
let client: pg.Client;

before(async () => {
  client = await connect(defined(server).url);
  await client.query('CREATE TABLE t (id int PRIMARY KEY, v bigint)');
});
after(async () => {
  await client?.end();
});

describe('a batch', () => {
  it('answers every statement in order, quiet ones with their command and row count only, in one round trip', async () => {
    const { result, queries } = await queriesDuring(() =>
      queryBatch(client, [
        { text: 'BEGIN', quiet: true },
        {
          text: 'SELECT set_config($1, $2, true) AS s, 7::int8 AS n',
          values: ['sf_test.x', 'a'],
          quiet: true,
        },
        { text: 'INSERT INTO t VALUES ($1, $2), ($3, $4)', values: [1, 10n, 2, 20n], quiet: true },
        { text: 'SELECT id, v FROM t ORDER BY id' },
        { text: "SELECT current_setting('sf_test.x') AS x, 9007199254740993::int8 AS big" },
        { text: 'COMMIT', quiet: true },
      ]),
    );
    assert.equal(queries, 1);
    const [begin, set, insert, rows, setting, commit] = result as pg.QueryResult[];
    assert.equal(begin?.command, 'BEGIN');
    assert.equal(set?.command, 'SELECT');
    assert.equal(set?.rowCount, 1);
    assert.deepEqual(set?.rows, []);
    assert.equal(insert?.command, 'INSERT');
    assert.equal(insert?.rowCount, 2);
    assert.deepEqual(rows?.rows, [
      { id: 1, v: 10n },
      { id: 2, v: 20n },
    ]);
    assert.deepEqual(setting?.rows, [{ x: 'a', big: 9007199254740993n }]);
    assert.equal(commit?.command, 'COMMIT');
  });

  it('stops at the failed statement, names it, and runs nothing after it', async () => {
    await assert.rejects(
      queryBatch(client, [
        { text: 'BEGIN', quiet: true },
        { text: 'INSERT INTO t VALUES ($1, $2)', values: [3, 30n], quiet: true },
        { text: 'INSERT INTO t VALUES ($1, $2)', values: [1, 0n] }, // the primary key is taken
        { text: 'COMMIT', quiet: true },
      ]),
      (failure: unknown) =>
        failure instanceof BatchFailure &&
        failure.index === 2 &&
        (failure.cause as { code?: string }).code === '23505',
    );
    // The COMMIT behind the failure did not run: the transaction is open and aborted until rolled back.
    await client.query('ROLLBACK');
    const { rows } = await client.query('SELECT count(*)::int AS n FROM t WHERE id = 3');
    assert.equal((rows[0] as { n: number }).n, 0);
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { createRouter, isShardflakeError, type Router, type ShardSession } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { RESTORE_POINT_LOCK } from '../../packages/shardflake/src/catalog/restore-points.js';
import { INSERT_DECISION_SQL } from '../../packages/shardflake/src/catalog/transactions.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { queryBatch } from '../../packages/shardflake/src/postgres/batch.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { queriesDuring } from '../support/queries.js';
import { until } from './support.js';

/**
 * What withShards sends, and that what it pipelines arrives whole, in order and in the right shard (cross.ts,
 * routing/session.ts). Two servers, 4 shards: 0 and 1 on a, 2 and 3 on b; a is every two-server transaction's last
 * agent (the first server joined).
 *
 * Round trips, counted as the queries the router's connections are given (a pipelined batch is one), fewest of a
 * few calls: a transfer (one update in each of two shards, awaited one after the other) is 4 for one withShard
 * doing both updates (BEGIN, the two updates, COMMIT), 3 for withShards on one server (BEGIN and the bounds with
 * the first update, the switch of search_path with the second, COMMIT) and 5 across two servers (each update with
 * its server's BEGIN, PREPARE, the decision with its COMMIT, COMMIT PREPARED). One more round trip anywhere fails.
 */
const servers = await useServers(2);
const [a, b] = servers;
const config = validateConfig(
  {
    servers: { a: defined(a).url, b: defined(b).url },
    catalog: 'a',
    logicalShards: 4,
    tables: {
      accounts: 'CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL)',
      marks:
        'CREATE TABLE marks (id bigint PRIMARY KEY DEFAULT next_id(), seq integer NOT NULL, shard integer NOT NULL)',
    },
  },
  'test-config',
);
let router: Router;
const admin: Record<'a' | 'b', pg.Client> = {} as Record<'a' | 'b', pg.Client>;
const DEBIT = 'UPDATE accounts SET balance = balance - 1 WHERE id = $1';
const CREDIT = 'UPDATE accounts SET balance = balance + 1 WHERE id = $1';
const schema = (shard: number) => `shard_${String(shard).padStart(4, '0')}`;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 2, listen: false, transactions: { recovery: false } });
  admin.a = await connect(defined(a).url);
  admin.b = await connect(defined(b).url);
  for (let shard = 0; shard < 4; shard++)
    await router.withShard({ shard }, (s) =>
      s.query('INSERT INTO accounts SELECT g, 100 FROM generate_series(0, 9) g'),
    );
});
after(async () => {
  await router?.close();
  await Promise.all(Object.values(admin).map((c) => c.end()));
});

async function balance(shard: number, id: number): Promise<bigint> {
  const client = shard < 2 ? admin.a : admin.b;
  const { rows } = await client.query(`SELECT balance FROM "${schema(shard)}".accounts WHERE id = $1`, [id]);
  return BigInt((rows[0] as { balance: string | bigint }).balance);
}

/** The fewest queries one call of `fn` gave the router's connections, over five calls (after one to warm up). */
async function fewestQueries(fn: () => Promise<unknown>): Promise<number> {
  await fn();
  let fewest = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 5; i++) fewest = Math.min(fewest, (await queriesDuring(fn)).queries);
  return fewest;
}

function transfer(from: number, to: number): Promise<unknown> {
  return router.withShards([{ shard: from }, { shard: to }], async ([x, y]) => {
    await x?.query(DEBIT, [1]);
    await y?.query(CREDIT, [1]);
  });
}

describe('round trips of a transfer', () => {
  it('one withShard doing both updates: 4', async () => {
    const n = await fewestQueries(() =>
      router.withShard({ shard: 0 }, async (s) => {
        await s.query(DEBIT, [2]);
        await s.query(CREDIT, [3]);
      }),
    );
    assert.equal(n, 4);
  });

  it('withShards over two shards of one server: 3, and the money moved', async () => {
    const [before0, before1] = [await balance(0, 1), await balance(1, 1)];
    assert.equal(await fewestQueries(() => transfer(0, 1)), 3);
    assert.equal(await balance(0, 1), before0 - 6n);
    assert.equal(await balance(1, 1), before1 + 6n);
  });

  it('withShards over two servers: 5, and the money moved with nothing left prepared', async () => {
    const [before0, before2] = [await balance(0, 1), await balance(2, 1)];
    assert.equal(await fewestQueries(() => transfer(0, 2)), 5);
    assert.equal(await balance(0, 1), before0 - 6n);
    assert.equal(await balance(2, 1), before2 + 6n);
    const { rows } = await admin.b.query('SELECT count(*)::int AS n FROM pg_prepared_xacts');
    assert.equal((rows[0] as { n: number }).n, 0);
  });
});

/**
 * A statement that records its place in the transaction (a counter kept in a setting local to the transaction,
 * which every session on a connection shares) and where it ran.
 */
const MARK = `INSERT INTO marks (seq, shard)
  SELECT n, $1 FROM (SELECT set_config('sf_test.seq', (coalesce(nullif(current_setting('sf_test.seq', true), ''), '0')::int + 1)::text, true)::int AS n) s
  RETURNING seq, current_schema() AS schema`;
const MARK_NO_PARAMETERS = (shard: number) => MARK.replace('$1', String(shard));

describe('statements of sessions sharing a connection', () => {
  it('run in call order, each in its own shard, whether sent with parameters, without, or through session.client', async () => {
    const calls: { shard: number; send: (s: ShardSession) => Promise<pg.QueryResult> }[] = [];
    // Sessions on shards 0 and 1 (server a) and 2 (server b), interleaved, none awaited before the next is sent.
    const order = [0, 1, 1, 0, 2, 0, 1, 2, 1, 0];
    order.forEach((shard, i) => {
      const how = i % 3;
      calls.push({
        shard,
        send: (s) =>
          how === 0
            ? s.query(MARK, [shard])
            : how === 1
              ? s.query(MARK_NO_PARAMETERS(shard))
              : (s.client.query(MARK, [shard]) as Promise<pg.QueryResult>),
      });
    });
    const results = await router.withShards([{ shard: 0 }, { shard: 1 }, { shard: 2 }], (sessions) =>
      Promise.all(calls.map((c) => c.send(sessions[c.shard] as ShardSession))),
    );
    // Each statement ran in its session's schema, and on each server in the order of the calls.
    const seq = { a: 0, b: 0 };
    results.forEach((r, i) => {
      const shard = calls[i]?.shard as number;
      const row = r.rows[0] as { seq: number; schema: string };
      assert.equal(row.schema, schema(shard), `call ${i} ran in its shard`);
      const server = shard < 2 ? 'a' : 'b';
      seq[server]++;
      assert.equal(row.seq, seq[server], `call ${i} ran in call order on server ${server}`);
    });
    // And the rows are where each statement said.
    for (let shard = 0; shard < 3; shard++) {
      const { rows } = await (shard < 2 ? admin.a : admin.b).query(
        `SELECT shard FROM "${schema(shard)}".marks ORDER BY seq`,
      );
      assert.deepEqual(
        rows.map((r: { shard: number }) => r.shard),
        order.filter((s) => s === shard),
      );
    }
  });
});

describe('the decision and its COMMIT in one round trip', () => {
  it('a decision refused by a tombstone leaves nothing committed on the last agent and nothing prepared', async () => {
    const [before0, before2] = [await balance(0, 5), await balance(2, 5)];
    // The restore-point lock held exclusive on a: the decision, which takes it shared, waits behind it while the
    // txid's tombstone is written, as recovery writes one.
    const holder = await connect(defined(a).url);
    let txid: string | undefined;
    const watcher = await createRouter(config, {
      poolSize: 2,
      listen: false,
      transactions: { recovery: false },
      onEvent: (event) => {
        if (event.type === 'transaction' && event.phase === 'prepare') txid ??= event.txid;
      },
    });
    try {
      await holder.query(
        `BEGIN; SELECT pg_advisory_xact_lock(${RESTORE_POINT_LOCK[0]}, ${RESTORE_POINT_LOCK[1]})`,
      );
      const committing = watcher
        .withShards([{ shard: 0 }, { shard: 2 }], async ([x, y]) => {
          await x?.query(DEBIT, [5]);
          await y?.query(CREDIT, [5]);
        })
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      await until(async () => {
        const { rows } = await admin.a.query(
          `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`,
        );
        return (rows[0] as { n: number }).n === 1;
      });
      await admin.a.query(`INSERT INTO shardflake.transactions (txid, outcome) VALUES ($1, 'abort')`, [
        defined(txid),
      ]);
      await holder.query('COMMIT');
      const error = await committing;
      assert.ok(isShardflakeError(error, 'TRANSACTION_ABORTED'), String(error));
    } finally {
      await holder.end();
      await watcher.close();
    }
    assert.equal(await balance(0, 5), before0);
    assert.equal(await balance(2, 5), before2);
    const { rows } = await admin.b.query('SELECT count(*)::int AS n FROM pg_prepared_xacts');
    assert.equal((rows[0] as { n: number }).n, 0);
    // The router's connections still serve (each was rolled back, not left in an aborted transaction).
    const [then0, then2] = [await balance(0, 1), await balance(2, 1)];
    await transfer(0, 2);
    assert.deepEqual([await balance(0, 1), await balance(2, 1)], [then0 - 1n, then2 + 1n]);
  });

  it('a decision too old to write fails, so the COMMIT sent behind it does not run', async () => {
    const client = await connect(defined(a).url);
    try {
      await assert.rejects(
        queryBatch(client, [
          { text: 'BEGIN' },
          { text: `INSERT INTO "${schema(0)}".marks (seq, shard) VALUES (-1, -1)` },
          // An age bound of 0 ms: every transaction is too old.
          { text: INSERT_DECISION_SQL, values: ['too-old-test', [], 0] },
          { text: 'COMMIT' },
        ]),
        (failure: unknown) => (failure as { cause?: { code?: string } }).cause?.code === '23502',
      );
      await client.query('ROLLBACK');
      const { rows } = await admin.a.query(
        `SELECT (SELECT count(*)::int FROM "${schema(0)}".marks WHERE seq = -1) AS marks,
                (SELECT count(*)::int FROM shardflake.transactions WHERE txid = 'too-old-test') AS decisions`,
      );
      assert.deepEqual(rows[0], { marks: 0, decisions: 0 });
    } finally {
      await client.end();
    }
  });
});

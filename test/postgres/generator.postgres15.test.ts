import assert from 'node:assert/strict';
import { test } from 'node:test';
import type pg from 'pg';
import {
  connect,
  ensureGeneratorAbove,
  installGenerator,
  isShardflakeError,
  lastIssuedId,
  layouts,
} from 'shardflake';
import { decodeId } from '../../packages/shardflake/src/ids/codec.js';
import { qualified, quoteIdent } from '../../packages/shardflake/src/postgres/identifier.js';
import { sessions } from './generator-fixture.js';

/*
 * The same generator on the machine's own PostgreSQL (15 here), when one answers at SHARDFLAKE_PG15_URL or
 * postgres://postgres@127.0.0.1:5432/test. The default test run does not need it: unreachable means skipped.
 */
const URL = process.env.SHARDFLAKE_PG15_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

async function reachable(): Promise<pg.Client | string> {
  try {
    return await connect(URL, { connectTimeoutMs: 1500 });
  } catch (error) {
    if (isShardflakeError(error)) return error.message;
    throw error;
  }
}

test('the generator on the machine’s PostgreSQL (15): install twice, concurrent bulk inserts, helpers, moved state', async (t) => {
  const client = await reachable();
  if (typeof client === 'string') {
    t.skip(
      `no PostgreSQL at ${URL.replace(/:[^:@/]*@/, ':****@')} (${client}); set SHARDFLAKE_PG15_URL to test one`,
    );
    return;
  }
  const schema = `sf_pg15_test_${process.pid}`;
  const pair = await sessions(URL, 2);
  try {
    const version = (await client.query('SHOW server_version_num')).rows[0].server_version_num as string;
    t.diagnostic(`server_version_num ${version}`);
    await installGenerator(client, { schema, shard: 321 });
    await installGenerator(client, { schema, shard: 321 });
    const table = qualified(schema, 'items');
    await client.query(
      `CREATE TABLE ${table} (id bigint PRIMARY KEY DEFAULT ${qualified(schema, 'next_id')}(), v int)`,
    );
    await Promise.all(
      pair.all.map((c, i) => c.query(`INSERT INTO ${table} (v) SELECT ${i} FROM generate_series(1, 200000)`)),
    );
    const { rows } = await client.query(
      `SELECT count(DISTINCT id)::int AS d, count(*) FILTER (WHERE ${qualified(schema, 'id_to_shard')}(id) <> 321)::int AS other,
              max(id) AS max_id FROM ${table}`,
    );
    assert.equal(rows[0].d, 400_000);
    assert.equal(rows[0].other, 0);
    const last = (await lastIssuedId(client, schema)) as bigint;
    assert.ok(last >= rows[0].max_id);
    const ahead = last + (3_600_000n << 23n);
    await ensureGeneratorAbove(client, schema, ahead);
    const next = (await client.query(`SELECT ${qualified(schema, 'next_id')}() AS id`)).rows[0].id as bigint;
    assert.ok(next > ahead);
    assert.equal(decodeId(next, layouts.instagram).fields.shard, 321);
    const ts = await client.query(
      `SELECT extract(epoch FROM ${qualified(schema, 'id_to_timestamp')}($1)) * 1000 AS ms`,
      [next.toString()],
    );
    assert.equal(Number(ts.rows[0].ms), decodeId(next, layouts.instagram).timestamp.getTime());
  } finally {
    await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`).catch(() => {});
    await pair.close();
    await client.end();
  }
});

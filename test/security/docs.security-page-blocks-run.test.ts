import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { pageBlocks } from '../docs/blocks.js';
import { makeCluster, withClient } from '../move/fixture.js';
import { useServers } from '../support/postgres.js';

/** Every code block of docs/security.md runs, in order, on a real server with a cluster on it. */
test('every SQL block of docs/security.md runs on a real cluster, and the router role it creates can write a shard', async () => {
  const blocks = pageBlocks('docs/security.md', ['sql']).map((b) => [b.code, b.kind, b.code] as const);
  assert.ok(blocks.length >= 3);
  const [server] = await useServers(1);
  const url = (server as { url: string }).url;
  const config = await makeCluster([server as never], 2);
  assert.equal(shardSchema(config, 0), 'shard_0000', 'the page names shard_0000');
  await withClient(url, async (c) => {
    for (const [, language, body] of blocks) {
      assert.equal(language, 'sql', 'the page holds SQL blocks only');
      const result = await c.query(body as string);
      // The seal check lists what could lift a fence: nothing on a fresh cluster.
      const last = Array.isArray(result) ? result.at(-1) : result;
      if (/shardflake_fenced/.test(body as string)) assert.equal(last.rows.length, 0);
    }
    // The role the page creates can read the catalog and write shard 0, and nothing else made it a superuser.
    await c.query('SET ROLE app_router');
    await c.query('SELECT count(*) FROM shardflake.shards');
    await c.query(`INSERT INTO shard_0000.items (note) VALUES ('from the docs')`);
    // … and keep what a transaction across servers and the deadlock detector write (decision rows, the log).
    await c.query(`INSERT INTO shardflake.transactions (txid, outcome) VALUES ('docs-check', 'abort')`);
    await c.query(`DELETE FROM shardflake.transactions WHERE txid = 'docs-check'`);
    await c.query(
      `INSERT INTO shardflake.deadlocks (victim, transactions, sessions, servers, waited_ms) VALUES ('docs', '{}', 0, '{}', 0)`,
    );
    await c.query('RESET ROLE');
  });
});

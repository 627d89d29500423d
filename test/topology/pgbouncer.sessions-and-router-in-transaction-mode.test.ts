import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import { startPgBouncer } from '../support/pgbouncer.js';
import { useServers } from '../support/postgres.js';

/**
 * PgBouncer in transaction mode between the router and its server: each transaction may run on another server
 * connection, so nothing may rely on session state. Shard sessions set their search_path per transaction
 * (`set_config(…, true)`), so a pool of server connections shared by all shards must never leak one shard's
 * schema into another's statements. The catalog is read through the bouncer too; only LISTEN needs a direct
 * connection (a notification arrives on the session that listened), so this router runs with `listen: false`.
 */
const [server] = (await useServers(1)) as [EmbeddedServer];
const bouncer = await startPgBouncer(server);
const tables = {
  notes:
    'CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT next_id(), author bigint NOT NULL, body text NOT NULL)',
};
await initCluster(
  validateConfig({ servers: { a: server.url }, catalog: 'a', logicalShards: 8, tables }, 'direct'),
);
const config = validateConfig(
  { servers: { a: bouncer.url }, catalog: 'a', logicalShards: 8, tables },
  'bouncer',
);
const router = await createRouter(config, { listen: false, poolSize: 8 });
after(() => router.close());

async function bouncerTransactions(): Promise<number> {
  const admin = new pg.Client({ connectionString: bouncer.url.replace(/\/[^/]*$/, '/pgbouncer') });
  await admin.connect();
  const { rows } = await admin.query('SHOW STATS');
  await admin.end();
  return Number(
    rows.find((r) => r.database === new URL(server.url).pathname.slice(1))?.total_xact_count ?? 0,
  );
}

describe('behind PgBouncer in transaction mode', () => {
  it('router calls and shard sessions land in their own shard, never in another one', async () => {
    const before = await bouncerTransactions();
    const ids = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        router.insert('notes', { author: i, body: `note ${i}` }, { key: i }),
      ),
    );
    for (const [i, id] of ids.entries()) {
      assert.equal(router.shardOfId(id), router.shardFor(i));
      assert.deepEqual(await router.get('notes', id), { id, author: BigInt(i), body: `note ${i}` });
    }
    // sessions on every shard, interleaved on a small pool: each sees only its own shard's rows
    const seen = await Promise.all(
      Array.from({ length: 8 }, (_, shard) =>
        router.withShard({ shard }, async (s) => {
          const { rows } = await s.query('SELECT current_schema() AS schema, count(*)::int AS n FROM notes');
          return { shard, schema: rows[0]?.schema, n: rows[0]?.n };
        }),
      ),
    );
    for (const { shard, schema, n } of seen) {
      assert.equal(schema, `shard_${String(shard).padStart(4, '0')}`);
      assert.equal(n, ids.filter((id) => router.shardOfId(id) === shard).length);
    }
    const readOnly = await router.withShard(
      { shard: 3 },
      async (s) => (await s.query('SELECT 1 AS one')).rows,
      {
        readOnly: true,
      },
    );
    assert.deepEqual(readOnly, [{ one: 1 }]);
    const many = await router.insertMany(
      'notes',
      [
        { author: 1, body: 'x' },
        { author: 2, body: 'y' },
      ],
      { shard: 5 },
    );
    assert.equal(many.length, 2);
    assert.ok((await bouncerTransactions()) > before + 80, 'the work did not go through the bouncer');
  });

  it("router.sql's prepared pieces fall back to unnamed ones when the bouncer loses them ('auto')", async () => {
    // 8 pieces of one shard, 4 at once: a client connection's next transaction often gets another server
    // connection, which never saw the statement the client parsed (PgBouncer 1.18 does not follow them)
    const sqlRouter = await createRouter(config, { listen: false, poolSize: 8, sqlShardsPerStatement: 1 });
    try {
      const direct = new pg.Client({ connectionString: server.url });
      await direct.connect();
      const { rows } = await direct.query('SELECT count(*)::int AS n FROM shard_0000.notes');
      await direct.end();
      const text = 'SELECT count(*) AS n FROM notes WHERE author >= $1';
      const perShard = 'SELECT count(*) AS n FROM notes WHERE author < $1';
      const total = (await router.sql(text, [0])).rows[0]?.n;
      assert.ok(typeof total === 'bigint' && total > BigInt(rows[0].n));
      for (let round = 0; round < 10; round++) {
        const answers = await Promise.all(Array.from({ length: 4 }, () => sqlRouter.sql(text, [0])));
        for (const a of answers) assert.deepEqual(a.rows, [{ n: total }]);
      }
      // the same calls with prepare: true keep named statements, and the bouncer loses one of them
      let lost: { sqlState?: string } | undefined;
      for (let round = 0; round < 40 && !lost; round++)
        await Promise.all(
          Array.from({ length: 4 }, () => sqlRouter.sql(perShard, [1000], { prepare: true })),
        ).catch((error: { sqlState?: string }) => {
          lost = error;
        });
      assert.ok(lost, 'the bouncer never lost a named statement: this test provokes nothing');
      assert.match(String(lost.sqlState), /^(26000|42P05)$/);
    } finally {
      await sqlRouter.close();
    }
  });
});

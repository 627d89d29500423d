import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  asId,
  createRouter,
  isShardflakeError,
  type Router,
  type RouterEvent,
  type ShardflakeId,
  type ShardSession,
} from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { bumpMapVersion } from '../../packages/shardflake/src/catalog/shards.js';
import { shardSchema } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';

const servers = await useServers(1);
const config = testConfig(servers, { logicalShards: 8 });
const shiftOf = BigInt(config.layout.field('shard')?.shift ?? 0);
let router: Router;
const events: RouterEvent[] = [];

/** Rows in a shard's photos, read straight from the server (not through a session). */
async function captions(shard: number): Promise<string[]> {
  const c = await connect(servers[0]?.url as string);
  try {
    const { rows } = await c.query(`SELECT caption FROM "${shardSchema(config, shard)}".photos ORDER BY id`);
    return rows.map((r: { caption: string }) => r.caption);
  } finally {
    await c.end();
  }
}

before(async () => {
  await initCluster(config);
  // One connection per server: every session below runs on the same backend, one after another.
  router = await createRouter(config, { poolSize: 1, onEvent: (e) => events.push(e) });
  // A table that exists only in public: a session must not find it through a search_path fall-back.
  const c = await connect(servers[0]?.url as string);
  await c.query('CREATE TABLE public.only_public (id int); CREATE TABLE public.photos (caption text)');
  await c.query(`INSERT INTO public.photos VALUES ('public copy')`);
  await c.end();
  for (let shard = 0; shard < 8; shard++)
    await router.withShard({ shard }, (s) =>
      s.query('INSERT INTO photos (user_id, caption) VALUES ($1, $2)', [shard, `marker ${shard}`]),
    );
});
after(async () => {
  await router?.close();
});

describe('shard sessions', () => {
  it('commit when fn resolves and return its result; roll back when it throws and rethrow its error as is', async () => {
    const id = await router.withShard({ key: 3 }, async (s) => {
      const { rows } = await s.query<{ id: ShardflakeId }>(
        `INSERT INTO photos (user_id, caption) VALUES (3, 'kept') RETURNING id`,
      );
      return rows[0]?.id as ShardflakeId;
    });
    assert.equal(typeof id, 'bigint');
    assert.equal(router.shardOfId(id), 3);
    assert.deepEqual(await captions(3), ['marker 3', 'kept']);

    const mine = new Error('fn says no');
    await assert.rejects(
      router.withShard({ key: 3 }, async (s) => {
        await s.query(`INSERT INTO photos (user_id, caption) VALUES (3, 'rolled back')`);
        throw mine;
      }),
      (e: unknown) => e === mine,
    );
    assert.deepEqual(await captions(3), ['marker 3', 'kept']);
  });

  it('a pool of one connection alternating shards after commit, rollback and error always sees the right shard', async () => {
    const pids = new Set<number>();
    const look = async (s: ShardSession) => {
      const { rows } = await s.query<{ path: string; caption: string; pid: number }>(
        `SELECT current_setting('search_path') AS path, caption, pg_backend_pid() AS pid FROM photos ORDER BY id LIMIT 1`,
      );
      const row = rows[0] as { path: string; caption: string; pid: number };
      pids.add(row.pid);
      return row;
    };
    const endings = ['commit', 'rollback', 'error', 'caught error'] as const;
    for (let round = 0; round < 3; round++) {
      for (const ending of endings) {
        for (const shard of [5, 1, 6, 2]) {
          const seen = await router
            .withShard({ shard }, async (s) => {
              const row = await look(s);
              if (ending === 'rollback') throw Object.assign(new Error('rollback'), { row });
              if (ending === 'error') await s.query('SELECT * FROM no_such_table');
              if (ending === 'caught error') await s.query('SELECT 1/0').catch(() => {});
              return row;
            })
            .catch((e: { row?: unknown }) => e.row ?? 'failed');
          if (seen !== 'failed') {
            assert.deepEqual(
              { path: (seen as { path: string }).path, caption: (seen as { caption: string }).caption },
              { path: `shard_000${shard}, shardflake_reference`, caption: `marker ${shard}` },
              `${ending}, shard ${shard}`,
            );
          }
          // Outside any session the pooled connection is back to the server's default search_path.
          const byShard = await router.queryByShard({
            shards: [shard],
            sql: (t) =>
              `SELECT current_setting('search_path') AS path, pg_backend_pid() AS pid FROM ${t('photos')} LIMIT 1`,
          });
          const outside = byShard.get(shard)?.[0] as { path: string; pid: number };
          assert.equal(outside.path, '"$user", public', `after ${ending} on shard ${shard}`);
          pids.add(outside.pid);
        }
      }
    }
    assert.equal(pids.size, 1, 'every session and read ran on the one pooled connection');
  });

  it('a caught error inside fn still rolls the transaction back, and says so', async () => {
    await assert.rejects(
      router.withShard({ shard: 4 }, async (s) => {
        await s.query(`INSERT INTO photos (user_id, caption) VALUES (4, 'lost')`);
        await s.query('SELECT 1/0').catch(() => {});
      }),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '25P02',
    );
    assert.deepEqual(await captions(4), ['marker 4']);
  });

  it('a table that exists only in public is not found from a session (42P01), even under a shard table name', async () => {
    await assert.rejects(
      router.withShard({ shard: 0 }, (s) => s.query('SELECT * FROM only_public')),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '42P01',
    );
    const rows = await router.withShard(
      { shard: 0 },
      async (s) => (await s.query('SELECT caption FROM photos')).rows,
    );
    assert.deepEqual(rows, [{ caption: 'marker 0' }]);
    // Built-in functions still resolve: pg_catalog is always searched.
    const now = await router.withShard(
      { shard: 0 },
      async (s) => (await s.query('SELECT now() AS t')).rows[0],
    );
    assert.ok(now?.t instanceof Date);
  });

  it('bad targets, shards outside the cluster, unknown tables and columns: one typed error, fn not run, nothing changed', async () => {
    let runs = 0;
    const fn = async (s: ShardSession) => {
      runs++;
      await s.query(`INSERT INTO photos (user_id, caption) VALUES (1, 'must not land')`);
    };
    for (const target of [{}, { key: 1, shard: 1 }, null, { name: 'x' }, 'shard 1']) {
      await assert.rejects(
        router.withShard(target as never, fn),
        (e: unknown) => isShardflakeError(e, 'INVALID_ARGUMENT'),
        JSON.stringify(target),
      );
    }
    for (const target of [{ shard: 8 }, { shard: -1 }, { shard: 1.5 }]) {
      await assert.rejects(router.withShard(target, fn), (e: unknown) =>
        isShardflakeError(e, 'UNKNOWN_SHARD'),
      );
    }
    // An id whose shard bits name a shard outside the cluster is not one of its ids (a key passed as an id?).
    await assert.rejects(router.withShard({ id: asId(9n << shiftOf) }, fn), (e: unknown) =>
      isShardflakeError(e, 'INVALID_ID'),
    );
    await assert.rejects(router.withShard({ id: 5 as unknown as ShardflakeId }, fn), (e: unknown) =>
      isShardflakeError(e, 'INVALID_ID'),
    );
    assert.equal(runs, 0);
    await assert.rejects(
      router.withShard({ shard: 1 }, async (s) => {
        await s.query(`INSERT INTO photos (user_id, caption) VALUES (1, 'before the bad column')`);
        await s.query(`INSERT INTO photos (user_id, nope) VALUES (1, 'x')`);
      }),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '42703',
    );
    await assert.rejects(router.withShard({ shard: 1 }, 'not a function' as never), (e: unknown) =>
      isShardflakeError(e, 'INVALID_ARGUMENT'),
    );
    for (let shard = 0; shard < 8; shard++) assert.ok(!(await captions(shard)).includes('must not land'));
    assert.deepEqual(await captions(1), ['marker 1']);
  });

  it('a session used after fn returned is refused with SESSION_CLOSED; COMMIT inside fn is refused', async () => {
    const kept = await router.withShard({ shard: 2 }, (s) => s);
    await assert.rejects(kept.query('SELECT 1'), (e: unknown) => isShardflakeError(e, 'SESSION_CLOSED'));
    assert.throws(
      () => kept.client.query('SELECT 1'),
      (e: unknown) => isShardflakeError(e, 'SESSION_CLOSED'),
    );
    await assert.rejects(
      router.withShard({ shard: 2 }, async (s) => {
        await s.query(`INSERT INTO photos (user_id, caption) VALUES (2, 'no early commit')`);
        await s.query('COMMIT');
      }),
      (e: unknown) => isShardflakeError(e, 'INVALID_ARGUMENT'),
    );
    assert.deepEqual(await captions(2), ['marker 2']);
  });

  it("a library's BEGIN/ROLLBACK through session.client becomes a savepoint inside the session", async () => {
    await router.withShard({ shard: 7 }, async (s) => {
      await s.client.query('BEGIN');
      await s.client.query(`INSERT INTO photos (user_id, caption) VALUES (7, 'inner, rolled back')`);
      await s.client.query('ROLLBACK');
      await s.client.query('begin');
      await s.client.query(`INSERT INTO photos (user_id, caption) VALUES (7, 'inner, kept')`);
      await s.client.query('commit');
      // Still in the session's transaction, still in the shard.
      assert.equal(
        (await s.query(`SELECT current_setting('search_path') AS p`)).rows[0]?.p,
        'shard_0007, shardflake_reference',
      );
    });
    assert.deepEqual(await captions(7), ['marker 7', 'inner, kept']);
  });

  it("a genuine error on a moving shard is reported at once, not retried as the move's", async () => {
    const catalog = await connect(servers[0]?.url as string);
    const setState = async (state: string) => {
      await catalog.query('BEGIN');
      await catalog.query('UPDATE shardflake.shards SET state = $1 WHERE shard = 5', [state]);
      await bumpMapVersion(catalog);
      await catalog.query('COMMIT');
    };
    await setState('moving');
    await router.refresh();
    assert.equal(router.placement(5).state, 'moving');
    const started = performance.now();
    let runs = 0;
    await assert.rejects(
      router.withShard({ shard: 5 }, async (s) => {
        runs++;
        const { rows } = await s.query<{ id: bigint }>('SELECT id FROM photos LIMIT 1');
        await s.query('INSERT INTO photos (id, user_id) VALUES ($1, 5)', [rows[0]?.id]);
      }),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '23505',
    );
    assert.equal(runs, 1);
    assert.ok(performance.now() - started < 5000, 'not held for the write retry time');
    await setState('active');
    await router.refresh();
    await catalog.end();
  });

  it('reports each session to the hook as an operation event', async () => {
    events.length = 0;
    await router.withShard({ shard: 6 }, (s) => s.query('SELECT 1'));
    const op = events.find((e) => e.type === 'operation');
    assert.ok(op && op.type === 'operation');
    assert.equal(op.operation, 'withShard');
    assert.deepEqual(op.shards, [6]);
    assert.deepEqual(op.servers, ['a']);
    assert.equal(op.nodes[0]?.role, 'primary');
    assertNoPassword(String(op.nodes[0]?.node), [servers[0]?.url as string], 'the node');
    assert.equal(op.retries, 0);
    assert.equal(op.error, undefined);
  });
});

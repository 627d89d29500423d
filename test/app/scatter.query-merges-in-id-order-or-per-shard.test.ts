import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  createRouter,
  isShardflakeError,
  type Router,
  type RouterEvent,
  type ShardflakeId,
} from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);
const config = testConfig(servers, { logicalShards: 16 });
let router: Router;
const events: RouterEvent[] = [];
let ids: bigint[] = [];
const rows = Array.from({ length: 300 }, (_, i) => ({
  user_id: BigInt(i),
  caption: i % 3 === 0 ? `match ${i}` : `other ${i}`,
}));

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { onEvent: (e) => events.push(e) });
  ids = await router.insertMany('photos', rows, { key: (r) => r.user_id });
});
after(async () => {
  await router?.close();
});

const desc = (a: bigint, b: bigint) => (a > b ? -1 : a < b ? 1 : 0);

describe('cross-shard queries', () => {
  it('merges the rows of every shard newest first, page by page (keyset), one statement per server', async () => {
    const expected = ids.filter((_, i) => i % 3 === 0).sort(desc);
    const seen: bigint[] = [];
    let before: ShardflakeId | undefined;
    events.length = 0;
    for (let page = 0; page < 20; page++) {
      const result = await router.query({
        sql: (t) => `SELECT id, caption FROM ${t('photos')} WHERE caption LIKE $1`,
        values: ['match %'],
        limit: 7,
        before,
      });
      for (const row of result.rows) assert.match(row.caption as string, /^match /);
      seen.push(...result.rows.map((r) => r.id as bigint));
      if (result.next === null) break;
      before = result.next;
    }
    assert.deepEqual(seen, expected);
    const op = events.find((e) => e.type === 'operation');
    assert.ok(op?.type === 'operation' && op.operation === 'query');
    assert.deepEqual([...op.servers].sort(), ['a', 'b']);
    assert.equal(op.shards.length, 16);
  });

  it('returns rows per shard, for chosen shards; values are never spliced into the text', async () => {
    const counts = await router.queryByShard({
      sql: (t) => `SELECT count(*)::int AS n, max(caption) AS top FROM ${t('photos')} WHERE caption <> $1`,
      values: ["x'; DROP TABLE photos; --"],
    });
    assert.deepEqual(
      [...counts.keys()].sort((a, b) => a - b),
      [...Array(16).keys()],
    );
    for (let shard = 0; shard < 16; shard++) {
      const expected = rows.filter((r) => router.shardFor(r.user_id) === shard).length;
      assert.equal(counts.get(shard)?.[0]?.n, expected, `shard ${shard}`);
    }
    const some = await router.queryByShard({
      shards: [3, 12],
      sql: (t) => `SELECT id FROM ${t('photos')} ORDER BY id`,
    });
    assert.deepEqual(
      [...some.keys()].sort((a, b) => a - b),
      [3, 12],
    );
    for (const [shard, list] of some)
      for (const r of list) assert.equal(router.shardOfId(r.id as ShardflakeId), shard);
  });

  it('refuses hostile table names, shards outside the cluster and a bad limit with typed errors', async () => {
    await assert.rejects(
      router.query({ sql: (t) => `SELECT id FROM ${t('photos"; DROP TABLE x; --')}` }),
      (e: unknown) => isShardflakeError(e, 'INVALID_IDENTIFIER'),
    );
    await assert.rejects(
      router.queryByShard({ shards: [16], sql: (t) => `SELECT id FROM ${t('photos')}` }),
      (e: unknown) => isShardflakeError(e, 'UNKNOWN_SHARD'),
    );
    await assert.rejects(
      router.query({ sql: (t) => `SELECT id FROM ${t('photos')}`, limit: 0 }),
      (e: unknown) => isShardflakeError(e, 'INVALID_ARGUMENT'),
    );
    await assert.rejects(
      router.query({ sql: (t) => `SELECT id FROM ${t('no_such_table')}` }),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR') && e.sqlState === '42P01',
    );
  });
});

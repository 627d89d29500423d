import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { testConfig } from '../cluster/cluster-config.js';
import { sqlRows, useServers } from '../support/postgres.js';

/**
 * Every method of a router, given values of the wrong kind where a table, a row, an options object, an array, a
 * shard or a callback belongs, refuses with a ShardflakeError — never a raw TypeError from deep inside (found
 * before: a symbol or an object as a table or shard, null as a row or options, a number as feed keys or query
 * values, a non-function callback on a router with lookups) — and the refused writes change nothing. A pool of
 * one connection shows that no refusal keeps a connection (a bad sqlStream `values` used to keep it for good).
 */
const servers = await useServers(1);
const config = testConfig(servers, {
  logicalShards: 4,
  tables: {
    photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint, caption text)',
    users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text, email text)',
  },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
});
let router: Router;
before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 1, connectTimeoutMs: 2000 });
});
after(async () => {
  await router?.close();
});

const throwing = {
  toString() {
    throw new Error('toString was called');
  },
};
/** Values of every wrong kind, including two that break a template literal (a symbol, a throwing toString). */
const WRONG: unknown[] = [
  null,
  undefined,
  -1,
  Number.NaN,
  2 ** 64,
  1n,
  'x',
  true,
  Symbol('s'),
  [1],
  {},
  Object.create(null),
  throwing,
  () => 1,
];
const label = (v: unknown): string => {
  if (typeof v === 'symbol') return 'a symbol';
  if (typeof v === 'bigint') return `${v}n`;
  if (v === throwing) return 'an object whose toString throws';
  return typeof v === 'object' && v !== null && Object.getPrototypeOf(v) === null
    ? 'an object without a prototype'
    : String(v);
};

/** The call (a value, a promise or an async iterable, drained) ends well or with a ShardflakeError. */
async function typedOrFine(what: string, call: () => unknown): Promise<void> {
  try {
    const out = call();
    if (out instanceof Promise) await out;
    else if (out && typeof out === 'object' && Symbol.asyncIterator in out)
      for await (const _ of out as AsyncIterable<unknown>);
  } catch (error) {
    assert.ok(
      isShardflakeError(error),
      `${what} threw ${error instanceof Error ? `${error.constructor.name}: ${error.message}` : 'a non-error'}`,
    );
  }
}

async function rowCounts(): Promise<number[]> {
  const counts: number[] = [];
  for (let shard = 0; shard < 4; shard++) {
    const schema = `shard_000${shard}`;
    const [row] = await sqlRows<{ n: string }>(
      servers[0]?.url as string,
      `SELECT (SELECT count(*) FROM ${schema}.photos) + (SELECT count(*) FROM ${schema}.users) AS n`,
    );
    counts.push(Number(row?.n));
  }
  return counts;
}

it('every method refuses wrong kinds with a typed error, and the refused writes change nothing', async () => {
  const id = await router.insert('photos', { user_id: 1, caption: 'kept' }, { key: 1 });
  const countsBefore = await rowCounts();
  const r = router as unknown as { [M in keyof Router]: (...args: unknown[]) => unknown };
  const fine = async () => {};
  const photo = { user_id: 2, caption: 'must not land' };
  const sql = (t: (name: string) => string) => `SELECT id FROM ${t('photos')}`;
  const calls: Record<string, (v: unknown) => unknown> = {
    placement: (v) => r.placement(v),
    'insert table': (v) => r.insert(v, photo, { key: 1 }),
    // An empty object is a row of defaults, which is valid: only the other kinds are wrong here.
    'insert row': (v) =>
      typeof v === 'object' && v !== null && !Array.isArray(v)
        ? undefined
        : r.insert('photos', v, { key: 1 }),
    'insert shard': (v) => r.insert('photos', photo, { shard: v }),
    'get table': (v) => r.get(v, id),
    'update table': (v) => r.update(v, id, { caption: 'changed' }),
    'update changes': (v) => r.update('photos', id, v),
    'delete table': (v) => r.delete(v, id),
    'insertMany rows[0]': (v) => r.insertMany('photos', [v, photo], { shard: 0 }),
    'insertMany shard': (v) => r.insertMany('photos', [photo], { shard: v }),
    'insertMany rows[0], table with a lookup': (v) => r.insertMany('users', [v], { shard: 0 }),
    'insertMany rows[1], table with a lookup': (v) => r.insertMany('users', [{ name: 'a' }, v], { shard: 0 }),
    'feed options': (v) => r.feed('photos', v),
    'feed keys': (v) => r.feed('photos', { column: 'user_id', keys: v }),
    'feed shards': (v) => r.feed('photos', { shards: v }),
    'feed shards[0]': (v) => r.feed('photos', { shards: [v] }),
    'withShard shard': (v) => r.withShard({ shard: v }, fine),
    'withShard fn, router with lookups': (v) =>
      typeof v === 'function' ? undefined : r.withShard({ shard: 0 }, v),
    query: (v) => r.query(v),
    'query values': (v) => r.query({ sql, values: v }),
    'query shards': (v) => r.query({ sql, shards: v }),
    'query sql result': (v) => r.query({ sql: () => v }),
    queryByShard: (v) => r.queryByShard(v),
    'queryByShard values': (v) => r.queryByShard({ sql, values: v }),
    'queryByShard shards': (v) => r.queryByShard({ sql, shards: v }),
    'sql options': (v) => r.sql('SELECT count(*) FROM photos', [], v),
    'sqlStream values': (v) => r.sqlStream('SELECT id FROM photos', v),
    'sqlStream options': (v) => r.sqlStream('SELECT id FROM photos', [], v),
    'sqlStream batchSize': (v) => r.sqlStream('SELECT id FROM photos', [], { batchSize: v }),
    'lookup name': (v) => r.lookup(v, 'a@example.com'),
    'lookupMany name': (v) => r.lookupMany(v, ['a@example.com']),
    observe: (v) => r.observe(v),
  };
  for (const [what, call] of Object.entries(calls))
    for (const v of WRONG) await typedOrFine(`${what} = ${label(v)}`, () => call(v));
  assert.deepEqual(await rowCounts(), countsBefore);
  // The one pooled connection is still there and still good.
  assert.deepEqual((await router.get('photos', id))?.caption, 'kept');
  assert.equal(Number((await router.sql('SELECT count(*) AS n FROM photos')).rows[0]?.n), 1);
});

it('the messages name the argument and what it should be', async () => {
  const refusals: [() => unknown, string, RegExp][] = [
    [
      () => router.insert('photos', null as never, { key: 1 }),
      'INVALID_ARGUMENT',
      /^insert row must be an object, not null$/,
    ],
    [
      () => router.get(Symbol('t') as never, 1n as never),
      'INVALID_IDENTIFIER',
      /^get table must be a string, not a symbol$/,
    ],
    [
      () => router.update('photos', 1n as never, null as never),
      'INVALID_ARGUMENT',
      /^update changes must be an object, not null$/,
    ],
    [
      () => router.placement({} as never),
      'UNKNOWN_SHARD',
      /^shard an object is outside the cluster's 4 logical shards$/,
    ],
    [
      () => router.feed('photos', { keys: 1 as never, column: 'user_id' }),
      'INVALID_ARGUMENT',
      /^feed keys must be an array, not a number$/,
    ],
    [
      () => router.queryByShard({ sql: () => 'SELECT 1', values: 'x' as never }),
      'INVALID_ARGUMENT',
      /^queryByShard values must be an array, not a string$/,
    ],
    [() => router.withShard({ shard: 0 }, 'fn' as never), 'INVALID_ARGUMENT', /^withShard needs a callback/],
    [
      () => router.sql('SELECT 1', [], null as never),
      'INVALID_ARGUMENT',
      /^sql options must be an object, not null$/,
    ],
    [
      async () => {
        for await (const _ of router.sqlStream('SELECT id FROM photos', [], { batchSize: 2 ** 32 }));
      },
      'INVALID_ARGUMENT',
      /^sqlStream batchSize must be a whole number from 1 to 2147483647, not 4294967296$/,
    ],
    [
      () => router.lookup({} as never, 'x'),
      'LOOKUP_NOT_READY',
      /^no lookup named an object in the router's config/,
    ],
  ];
  for (const [call, code, message] of refusals)
    await assert.rejects(
      (async () => call())(),
      (e: unknown) => isShardflakeError(e, code as never) && message.test(e.message),
      String(message),
    );
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createRouter, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import type { ShardflakeId } from '../../packages/shardflake/src/ids/id.js';
import { entryTable, PENDING_SETTING } from '../../packages/shardflake/src/lookups/ddl.js';
import { besideStatements, entryStatements } from '../../packages/shardflake/src/lookups/maintain.js';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { useServers } from '../support/postgres.js';
import { usersWithEmailLookup } from './cluster-config.js';

/**
 * The race the owner-cache property test found (a row committed without its entry, its value open to a second
 * owner), written down and provoked step by step on one server:
 *   1. row A holds v: its entry (v, A) is committed;
 *   2. a claim of v by another row runs its entry insert, INSERT … ON CONFLICT DO NOTHING: (v, A) is there, so the
 *      insert writes nothing;
 *   3. A lets v go: its change to another value commits, deleting (v, A);
 *   4. the claim's check runs, in a new snapshot. Asking "does another id hold v?" it saw no one and passed, and
 *      the claim committed its row with no entry. Asking "is my entry there?" it fails: UNIQUE_VIOLATION.
 * Both forms of the check are run: the one that rides with the commit of a write across servers
 * (entryStatements) and the one of an insert placed beside its entry (besideStatements).
 */
const servers = await useServers(1);
const config = usersWithEmailLookup(servers);
const url = servers[0]?.url as string;
let router: Router;
let claimer: pg.Client;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false } });
  claimer = new pg.Client({ connectionString: url });
  // The servers stop before this file's own after hook runs: the connection's end is then no error.
  claimer.on('error', () => {});
  await claimer.connect();
});
after(async () => {
  await claimer?.end();
  await router?.close();
});

const DIVISION_BY_ZERO = '22012';
let run = 0;

/** Steps 1: a row that holds a new value; returns the value, its entry shard's schema and the row's id. */
async function heldValue(): Promise<{ value: string; shard: number; schema: string; owner: ShardflakeId }> {
  const value = `held${++run}@example.com`;
  const owner = await router.insert('users', { name: 'owner', email: value }, { lookup: 'user_email' });
  const shard = shardForKey(value, 4);
  return { value, shard, schema: router.placement(shard).schema, owner };
}

/** The entries of `value` now, as ids. */
async function entriesOf(schema: string, value: string): Promise<string[]> {
  const { rows } = await router.withShard({ shard: 0 }, (s) =>
    s.query<{ id: string }>(
      `SELECT id::text FROM ${qualified(schema, entryTable('user_email'))} WHERE value = $1`,
      [value],
    ),
  );
  return rows.map((r) => r.id);
}

describe('an owner that lets the value go between a claim’s entry insert and its check', () => {
  it('the check of a write across servers fails (UNIQUE_VIOLATION’s SQLSTATE): the claim commits nothing', async () => {
    const { value, shard, schema, owner } = await heldValue();
    const claim = entryStatements(
      [{ lookup: 'user_email', value, id: 424242n, op: 'add', shard, unique: true }],
      () => schema,
    );
    assert.equal(claim.length, 2, 'an insert and its check');
    const [insert, check] = claim as [(typeof claim)[0], (typeof claim)[0]];
    await claimer.query('BEGIN');
    try {
      assert.equal(
        (await claimer.query(insert.text, insert.values as unknown[])).rowCount,
        0,
        'step 2 skips',
      );
      await router.update('users', owner, { email: `${value}.gone` });
      assert.deepEqual(await entriesOf(schema, value), [], 'step 3: v has no entry');
      await assert.rejects(claimer.query(check.text, check.values as unknown[]), (e: { code?: string }) => {
        assert.equal(e.code, DIVISION_BY_ZERO);
        assert.ok(isUniqueViolation(check.onError?.(e)));
        return true;
      });
    } finally {
      await claimer.query('ROLLBACK');
    }
  });

  it('the check of an insert placed beside its entry fails the same way', async () => {
    const { value, shard, schema, owner } = await heldValue();
    const [insert, check] = besideStatements(
      [{ lookup: 'user_email', value, shard, unique: true }],
      schema,
      () => schema,
      4,
    ) as [
      { text: string; values?: unknown[] },
      { text: string; values?: unknown[]; onError?: (e: unknown) => unknown },
    ];
    await claimer.query('BEGIN');
    try {
      await claimer.query(`SET LOCAL ${PENDING_SETTING} = on`);
      await claimer.query(`INSERT INTO ${qualified(schema, 'users')} (name, email) VALUES ('claimer', $1)`, [
        value,
      ]);
      assert.equal((await claimer.query(insert.text, insert.values)).rowCount, 0, 'step 2 skips');
      await router.update('users', owner, { email: `${value}.gone` });
      await assert.rejects(claimer.query(check.text, check.values), (e: { code?: string }) => {
        assert.equal(e.code, DIVISION_BY_ZERO);
        assert.ok(isUniqueViolation(check.onError?.(e)));
        return true;
      });
    } finally {
      await claimer.query('ROLLBACK');
    }
  });

  it('without the owner letting go in between, both checks pass a claim of a free value and write its entry', async () => {
    const value = `free${++run}@example.com`;
    const shard = shardForKey(value, 4);
    const schema = router.placement(shard).schema;
    const claim = entryStatements(
      [{ lookup: 'user_email', value, id: 434343n, op: 'add', shard, unique: true }],
      () => schema,
    );
    await claimer.query('BEGIN');
    try {
      for (const s of claim) await claimer.query(s.text, s.values as unknown[]);
      const { rows } = await claimer.query(
        `SELECT id::text FROM ${qualified(schema, entryTable('user_email'))} WHERE value = $1`,
        [value],
      );
      assert.deepEqual(rows, [{ id: '434343' }]);
    } finally {
      await claimer.query('ROLLBACK');
    }
  });
});

function isUniqueViolation(error: unknown): boolean {
  return (error as { code?: string } | undefined)?.code === 'UNIQUE_VIOLATION';
}

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type pg from 'pg';
import { connect, defineLayout, GUARD_KINDS, generatorSql } from 'shardflake';
import { qualified } from '../../src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';
import { sessions, setTestClock } from './generator-fixture.js';

/*
 * The dangerous moment of the generator is the catch-up: the counter jumps to the clock with setval while other
 * sessions call nextval. This test makes that moment wide and frequent, on purpose:
 * - the test install's pause hook holds every catch-up's window (between its nextval and its setval) open 2 ms;
 * - three sessions see the clock 20 ms behind the fourth (as if it stepped back between their readings), so they
 *   keep taking fast-path ids while the fourth catches the counter up to its own time on nearly every call;
 * - the layout has no field between time and sequence (time | sequence | shard), so fetched values run straight
 *   into the catch-up's target instead of into a gap.
 * With the guard left out of the fast path (the control) this produces duplicate keys every time we ran it; with
 * either guard it must produce none.
 */
const layout = defineLayout({
  name: 'race',
  epoch: 1314220021721,
  timeUnitMs: 1,
  fields: [
    { kind: 'time', bits: 41 },
    { kind: 'sequence', bits: 8 },
    { kind: 'shard', bits: 13 },
  ],
});
const BEHIND = 3;
const CATCH_UPS = 400;

/** The install SQL with the seqlock comparison removed from next_id() (the naive "read, compare, setval"). */
function withoutGuard(sql: string, schema: string): string {
  const guard = `pg_catalog.pg_sequence_last_value('"${schema}"."next_id_guard"'::regclass)`;
  const unguarded = sql
    .replace(`${guard}\n       = pg_catalog.pg_sequence_last_value(\n           CASE WHEN`, '1 = (CASE WHEN')
    .replace(`THEN '"${schema}"."next_id_guard"'::regclass END)`, 'THEN 1 END)');
  assert.notEqual(unguarded, sql, 'the control could not remove the guard');
  return unguarded;
}

async function race(
  url: string,
  schema: string,
  sql: string,
): Promise<{ rows: number; duplicateErrors: number }> {
  const admin = await connect(url);
  const many = await sessions(url, BEHIND + 1);
  try {
    await admin.query(sql);
    const table = qualified(schema, 'items');
    await admin.query(
      `CREATE TABLE ${table} (id bigint PRIMARY KEY DEFAULT ${qualified(schema, 'next_id')}(), v int)`,
    );
    await setTestClock(
      admin,
      schema,
      `pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000
         - coalesce(nullif(pg_catalog.current_setting('shardflake.test_skew_ms', true), ''), '0')::float8`,
    );
    await admin.query(
      `CREATE OR REPLACE FUNCTION ${qualified(schema, 'next_id_test_pause')}() RETURNS void LANGUAGE sql VOLATILE
       BEGIN ATOMIC SELECT pg_catalog.pg_sleep(0.001); END`,
    );
    const [ahead, ...behind] = many.all as [pg.Client, ...pg.Client[]];
    for (const c of behind) await c.query(`SET shardflake.test_skew_ms = 20`);
    let done = false;
    let inserted = 0;
    const runAhead = (async () => {
      try {
        // One row per statement: each call catches the counter up to this session's (later) clock.
        for (let i = 0; i < CATCH_UPS; i++) {
          await ahead.query(`INSERT INTO ${table} (v) VALUES (-1)`);
          inserted += 1;
        }
      } finally {
        done = true;
      }
    })();
    const runBehind = behind.map(async (c, i) => {
      while (!done) {
        await c.query(`INSERT INTO ${table} (v) SELECT ${i} FROM generate_series(1, 200)`);
        inserted += 200;
      }
    });
    const outcomes = await Promise.allSettled([runAhead, ...runBehind]);
    done = true;
    const failed = outcomes
      .filter((o) => o.status === 'rejected')
      .map((o) => (o as PromiseRejectedResult).reason);
    for (const e of failed) if ((e as { code?: string }).code !== '23505') throw e;
    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${table}`);
    assert.equal(rows[0].n, inserted);
    return { rows: inserted, duplicateErrors: failed.length };
  } finally {
    await many.close();
    await admin.end();
  }
}

test('catch-ups racing fast paths under a stepping clock never hand out an id twice', async (t) => {
  const [server] = await useServers(1);
  const url = (server as { url: string }).url;
  for (const guard of GUARD_KINDS) {
    await t.test(
      `guard ${guard}: ${CATCH_UPS} held-open catch-ups against ${BEHIND} sessions, no duplicate`,
      async () => {
        const schema = `race_${guard}`;
        const result = await race(
          url,
          schema,
          generatorSql({ schema, shard: 77, layout, guard, testClock: true }),
        );
        assert.equal(result.duplicateErrors, 0);
        assert.ok(result.rows > CATCH_UPS);
      },
    );
  }
  await t.test('control: the same race without the guard does produce duplicates', async () => {
    // Whether a run hits the race depends on how fast the behind sessions fetch values (R per ms) against the
    // ids a tick holds (2^bits): the counter must lag the ahead session's clock (R < 2^bits), yet the values
    // fetched inside one held-open window must reach the catch-up's target (roughly R > 2^bits / 2). R depends
    // on the machine's load, so the attempts sweep the sequence width, covering R from about 8 to 512 per ms;
    // the first duplicate ends the sweep.
    let duplicates = 0;
    const widths = [8, 7, 9, 6, 5, 4];
    for (let attempt = 0; attempt < widths.length && duplicates === 0; attempt++) {
      const schema = `race_unguarded_${attempt}`;
      const swept = defineLayout({
        name: `race-${widths[attempt]}`,
        epoch: layout.epoch,
        timeUnitMs: 1,
        fields: [
          { kind: 'time', bits: 41 },
          { kind: 'sequence', bits: widths[attempt] as number },
          { kind: 'shard', bits: 13 },
        ],
      });
      const sql = withoutGuard(generatorSql({ schema, shard: 77, layout: swept, testClock: true }), schema);
      duplicates += (await race(url, schema, sql)).duplicateErrors;
    }
    assert.ok(
      duplicates > 0,
      'the unguarded generator survived the race: the test is too weak to prove anything',
    );
  });
});

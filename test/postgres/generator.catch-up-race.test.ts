import assert from 'node:assert/strict';
import { test } from 'node:test';
import type pg from 'pg';
import { connect, defineLayout, generatorSql } from 'shardflake';
import { qualified } from '../../src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';
import { sessions, setTestClock } from './generator-fixture.js';

/*
 * The dangerous moment of any counter-in-a-sequence generator is the catch-up: the counter jumps to the clock with
 * setval while other sessions call nextval. This test makes that moment wide and frequent, on purpose:
 * - the test install's pause hook holds every catch-up's window (between its nextval and its setval) open 1 ms;
 * - three sessions see the clock 20 ms behind the fourth (as if it stepped back between their readings), so they
 *   keep taking fast-path ids while the fourth catches the counter up to its own time on nearly every call;
 * - the layout has no field between time and sequence (time | sequence | shard), so in the naive design fetched
 *   values run straight into the catch-up's target instead of into a gap.
 * The control is that naive design, written out below: the counter is the id without its shard bits and the
 * catch-up stores the clock's tick into it (what a hand-rolled generator does). It hands out duplicates in this
 * race. shardflake's generator, whose fetches never change the era a catch-up stores, must not.
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

/**
 * The naive generator for `layout` with `seqBits` sequence bits (shard field 13 bits at the bottom), with the same
 * test clock and pause hook as a test install: fast path "nextval, keep if not behind the clock", catch-up
 * "under a lock: nextval, if behind the clock setval(now's tick)". No guard: the race is unprotected.
 */
function naiveGeneratorSql(schema: string, shard: number, seqBits: number): string {
  const s = `"${schema}"`;
  const timeShift = seqBits + 13;
  const now = `pg_catalog.floor(${s}.next_id_clock_ms() - ${layout.epoch}::float8)::bigint`;
  return `
CREATE SCHEMA ${s};
CREATE SEQUENCE ${s}.counter AS bigint INCREMENT ${1 << 13} MINVALUE 0 START 0 CACHE 1;
CREATE FUNCTION ${s}.next_id_clock_ms() RETURNS float8 LANGUAGE sql VOLATILE
  RETURN pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000;
CREATE FUNCTION ${s}.next_id_test_pause() RETURNS void LANGUAGE sql VOLATILE BEGIN ATOMIC END;
CREATE FUNCTION ${s}.catch_up() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE v bigint; t bigint;
BEGIN
  PERFORM pg_catalog.pg_advisory_lock(4242);
  t := ${now};
  v := pg_catalog.nextval('${s}.counter');
  PERFORM ${s}.next_id_test_pause();
  IF (v >> ${timeShift}) < t THEN
    PERFORM pg_catalog.setval('${s}.counter', t << ${timeShift}, true);
    v := t << ${timeShift};
  END IF;
  PERFORM pg_catalog.pg_advisory_unlock(4242);
  RETURN v | ${shard};
END $$;
CREATE FUNCTION ${s}.next_id() RETURNS bigint LANGUAGE sql VOLATILE RETURN CASE
  WHEN (pg_catalog.nextval('${s}.counter') >> ${timeShift}) >= ${now}
  THEN pg_catalog.currval('${s}.counter') | ${shard}
  ELSE ${s}.catch_up() END;`;
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
  await t.test(`${CATCH_UPS} held-open catch-ups against ${BEHIND} sessions, no duplicate`, async () => {
    const schema = 'race_shardflake';
    const result = await race(url, schema, generatorSql({ schema, shard: 77, layout, testClock: true }));
    assert.equal(result.duplicateErrors, 0);
    assert.ok(result.rows > CATCH_UPS);
  });
  await t.test('control: the same race against the naive generator does produce duplicates', async () => {
    // Whether a run hits the race depends on how fast the behind sessions fetch values (R per ms) against the
    // ids a tick holds (2^bits): the counter must lag the ahead session's clock (R < 2^bits), yet the values
    // fetched inside one held-open window must reach the catch-up's target (roughly R > 2^bits / 2). R depends
    // on the machine's load, so the attempts sweep the sequence width, covering R from about 8 to 512 per ms;
    // the first duplicate ends the sweep.
    let duplicates = 0;
    const widths = [8, 7, 9, 6, 5, 4];
    for (let attempt = 0; attempt < widths.length && duplicates === 0; attempt++) {
      const schema = `race_naive_${attempt}`;
      const sql = naiveGeneratorSql(schema, 77, widths[attempt] as number);
      duplicates += (await race(url, schema, sql)).duplicateErrors;
    }
    assert.ok(
      duplicates > 0,
      'the naive generator survived the race: the test is too weak to prove anything',
    );
  });
});

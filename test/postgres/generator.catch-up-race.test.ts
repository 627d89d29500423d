import assert from 'node:assert/strict';
import { test } from 'node:test';
import type pg from 'pg';
import { connect, defineLayout, generatorSql } from 'shardflake';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';
import { useServers } from '../support/postgres.js';
import { sessions, setTestClock } from './generator-fixture.js';

/*
 * The dangerous moment of any counter-in-a-sequence generator is the catch-up: the counter jumps to the clock with
 * setval while other sessions call nextval. This test makes that moment wide and frequent, on purpose:
 * - three sessions see the clock 20 ms behind the fourth (as if it stepped back between their readings), so they
 *   keep taking fast-path ids while the fourth catches the counter up to its own time on nearly every call;
 * - every catch-up's window (between its nextval and its setval) is held open until the other sessions have
 *   fetched as far as they can: past the catch-up's target in the naive design, past the sequence field (the
 *   tripwire) in shardflake's;
 * - the naive layout has no field between time and sequence (time | sequence | shard), so fetched values run
 *   straight into the catch-up's target instead of into a gap.
 * The control is that naive design, written out below: the counter is the id without its shard bits and the
 * catch-up stores the clock's tick into it (what a hand-rolled generator does). It hands out duplicates in this
 * race. shardflake's generator must not.
 */
const SHARD = 77;
const epoch = 1314220021721;
/** shardflake's side: Instagram's shape with a small sequence field, so that eras fill up all the time. */
const layout = defineLayout({
  name: 'race',
  epoch,
  timeUnitMs: 1,
  fields: [
    { kind: 'time', bits: 41 },
    { kind: 'shard', bits: 13 },
    { kind: 'sequence', bits: 8 },
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
  const now = `pg_catalog.floor(${s}.next_id_clock_ms() - ${epoch}::float8)::bigint`;
  return `
CREATE SCHEMA ${s};
CREATE SEQUENCE ${s}.counter AS bigint INCREMENT ${1 << 13} MINVALUE 0 START 0 CACHE 1;
CREATE FUNCTION ${s}.next_id_clock_ms() RETURNS float8 LANGUAGE sql VOLATILE
  RETURN pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000;
CREATE FUNCTION ${s}.next_id_test_pause() RETURNS void LANGUAGE sql VOLATILE BEGIN ATOMIC END;
-- Holds the ahead session's catch-up window open until the behind sessions have fetched past its target (at most
-- 300 ms), so that the race happens whenever they are running at all, however loaded the machine is. (Behind
-- sessions do not wait: they would only hold the lock while nobody else can move.)
CREATE FUNCTION ${s}.wait_past(target bigint) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE deadline timestamptz := pg_catalog.clock_timestamp() + interval '300 ms';
BEGIN
  WHILE coalesce(pg_catalog.pg_sequence_last_value('${s}.counter'), 0) <= target
        AND pg_catalog.clock_timestamp() < deadline LOOP
    PERFORM pg_catalog.pg_sleep(0.0005);
  END LOOP;
END $$;
CREATE FUNCTION ${s}.catch_up() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE v bigint; t bigint;
BEGIN
  PERFORM pg_catalog.pg_advisory_lock(4242);
  t := ${now};
  v := pg_catalog.nextval('${s}.counter');
  IF (v >> ${timeShift}) < t THEN
    IF coalesce(nullif(pg_catalog.current_setting('shardflake.test_skew_ms', true), ''), '0') = '0' THEN
      PERFORM ${s}.wait_past(t << ${timeShift});
    END IF;
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

/**
 * shardflake's pause hook for the race: holds the slow path's window open until the fetches of other sessions
 * have carried past the sequence field (the shard field is no longer 77), i.e. as far as they can get before
 * they all wait for the lock — at most 5 ms. Windows that saw that happen are counted in `crossed`, so the test
 * can show it built the case the correctness argument is about.
 */
function widestWindowSql(schema: string): string {
  const counter = qualified(schema, 'next_id_counter');
  const crossed = qualified(schema, 'crossed');
  const shardOf = `((coalesce(pg_catalog.pg_sequence_last_value('${counter}'), 0) >> 8) & 8191)`;
  return `CREATE SEQUENCE ${crossed};
CREATE OR REPLACE FUNCTION ${qualified(schema, 'next_id_test_pause')}() RETURNS void LANGUAGE plpgsql
VOLATILE AS $$
DECLARE deadline timestamptz := pg_catalog.clock_timestamp() + interval '5 ms';
BEGIN
  IF ${shardOf} <> ${SHARD} THEN
    RETURN; -- this slow path is the one the tripwire sent here
  END IF;
  WHILE ${shardOf} = ${SHARD} AND pg_catalog.clock_timestamp() < deadline LOOP
    PERFORM pg_catalog.pg_sleep(0.0002);
  END LOOP;
  IF ${shardOf} <> ${SHARD} THEN
    PERFORM pg_catalog.nextval('${crossed}');
  END IF;
END $$`;
}

async function race(
  url: string,
  schema: string,
  sql: string,
  catchUps = CATCH_UPS,
  afterInstall = '',
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
    if (afterInstall) await admin.query(afterInstall);
    const [ahead, ...behind] = many.all as [pg.Client, ...pg.Client[]];
    for (const c of behind) await c.query(`SET shardflake.test_skew_ms = 20`);
    let done = false;
    let inserted = 0;
    const runAhead = (async () => {
      try {
        // One row per statement: each call catches the counter up to this session's (later) clock.
        for (let i = 0; i < catchUps; i++) {
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
    // A duplicate id shows as 23505, or, when two multi-row inserts each hold one copy of the other's next id, as
    // PostgreSQL's own deadlock while inserting into the primary key (40P01 naming items_pkey): both are duplicates.
    const duplicate = (e: { code?: string; where?: string }) =>
      e.code === '23505' || (e.code === '40P01' && /items_pkey/.test(e.where ?? ''));
    for (const e of failed) if (!duplicate(e as { code?: string; where?: string })) throw e;
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
    const sql = generatorSql({ schema, shard: SHARD, layout, testClock: true });
    const result = await race(url, schema, sql, CATCH_UPS, widestWindowSql(schema));
    assert.equal(result.duplicateErrors, 0);
    assert.ok(result.rows > CATCH_UPS);
    const admin = await connect(url);
    const { rows } = await admin.query(`SELECT pg_sequence_last_value('${schema}.crossed') AS n`);
    await admin.end();
    const crossed = Number(rows[0].n ?? 0);
    t.diagnostic(
      `${crossed} slow paths saw other sessions carry past the sequence field inside their window`,
    );
    assert.ok(crossed > 0, 'no window saw the tripwire crossed: the race was not built');
  });
  await t.test('control: the same race against the naive generator does produce duplicates', async () => {
    // The naive catch-up holds its window open until the behind sessions have fetched past its target, so the
    // race no longer depends on how fast this machine runs them (a fixed 1 ms window missed it on a loaded
    // machine). A second width and a few more rounds are only a margin; the first duplicate ends the sweep.
    let duplicates = 0;
    const widths = [8, 6, 4];
    for (let attempt = 0; attempt < widths.length && duplicates === 0; attempt++) {
      const schema = `race_naive_${attempt}`;
      const sql = naiveGeneratorSql(schema, SHARD, widths[attempt] as number);
      duplicates += (await race(url, schema, sql, 30)).duplicateErrors;
    }
    assert.ok(
      duplicates > 0,
      'the naive generator survived the race: the test is too weak to prove anything',
    );
  });
});

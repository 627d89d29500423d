import { expectObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { type Layout, type LayoutField, type LayoutSpec, resolveLayout, withEpoch } from '../ids/layout.js';
import { qualified, quoteIdent, quoteLiteral, validateIdentifier } from './identifier.js';
import {
  keepCheck,
  type SlowPathEntry,
  SYSTEM_CLOCK_MS,
  slowPathCall,
  slowPathInstallSql,
  tickOf,
} from './slow-path-sql.js';

/*
 * The id generator that runs inside PostgreSQL, one per logical shard (schema). The layout must be shaped like
 * Instagram's: time | shard | sequence, most significant first. T below is the time field's shift (23 for
 * instagram: 13 shard bits + 10 sequence bits).
 *
 * STATE. One sequence, `next_id_counter` (INCREMENT 1, CACHE 1), holds an id of this shard: c = era · 2^T +
 * F · 2^S + s, where the era is a tick (whole time units since the layout's epoch), S the shard field's shift and
 * F the shard field. A store (setval) always writes the pair (era, shard, 0); `nextval` — an atomic fetch-and-add
 * that no transaction can roll back — then counts s up, and when s outgrows its field the carry lands in F, so F
 * stops being this shard. A value is KEEPABLE at tick `now` when F = shard (the sequence still fits) and
 * era ≥ now; a kept value is the id itself, nothing to assemble.
 *
 * FAST PATH (`next_id()`, one expression, no lock, one relation, like bigserial): v := nextval; keep v if it is
 * keepable, else the slow path runs (v is a gap in the ids, never a duplicate).
 *
 * SLOW PATH (`next_id_new_era()`, about once per tick, or once per 2^seqBits ids when demand outruns the clock).
 * Under a session-level advisory lock keyed by the counter (released before it returns and in its exception
 * handler — never held until commit):
 *    v := nextval; if v is keepable, return it (another slow path already started a new era);
 *    else store the pair (e', shard, 0) with e' := max(now, era(v) + 1), and return that id.
 * Version 4 writes the same steps in 4 PL/pgSQL expressions (about 20 functions and operators) instead of 9 (about
 * 30), and takes and releases the lock inside its exception block (see slowPathBody in slow-path-sql.ts): PL/pgSQL sets each expression
 * and its functions up again in every transaction, and nearly every slow path is the first call of its transaction. Counted with callgrind (scripts/next-id-callgrind.sh,
 * docs/next-id.md, "Cost"): one call ≈ 57,400 instructions, against ≈ 68,600 in version 3.
 * Version 6 writes that body ONCE PER DATABASE (slow-path-sql.ts: `shardflake_generator.new_era(counter, the
 * shard's constants)`, PL/pgSQL, running with its caller's rights) instead of once per shard: the slow path runs
 * about once per tick per shard, so a backend writing thousands of shards compiled thousands of copies (a
 * PL/pgSQL function and four cached plans each, ≈90 kB per shard written; issue 33 item 2). The shard's
 * `next_id_new_era()` is now one call of it with the shard's constants (an SQL function from PostgreSQL 18 on, a
 * PL/pgSQL RETURN before: slowPathInstallSql says why): SECURITY DEFINER, no arguments, search_path pinned (see
 * slowPathEntry below). A backend now grows ≈ 70–84 kB per shard written instead of ≈ 155 kB;
 * on PostgreSQL 18 the call costs ≈ 77,800 instructions instead of ≈ 59,400 (13,900 the SQL function's executor
 * around the body, 5,300 the constants passed as arguments instead of folded), i.e. +13% on an insert that starts
 * an era, nothing on one that keeps a fast-path id; on 15 (a PL/pgSQL entry point) ≈ 76,200 instead of ≈ 63,600.
 * A PL/pgSQL entry point on 18 would call cheaper but compile and plan per shard again. Over a connection the
 * difference does not show (pgbench, ≈ 80% of inserts starting an era: within ±1.5% either way).
 * Measured: docs/benchmarks.md, "Connections warm on a slice of shards".
 *
 * WHY NO ID IS HANDED OUT TWICE. Counter values fetched between two stores are distinct, and they are below the
 * next store's value, so that every value the counter ever hands out is greater than every earlier one. The
 * second half is the whole argument: a store writes (era(v) + 1, shard, 0) or more, where v is what its own
 * nextval read under the lock, and it must exceed everything fetched up to the store. Only fast paths fetch while
 * the store's lock is held (slow paths wait for it), and once F has left this shard no fetch of that store
 * interval is keepable again, so each other session fetches at most once more (its next non-keepable value sends
 * it to wait for the lock). So between two stores the counter advances by at most 2^seqBits + (sessions) + 1,
 * and PostgreSQL runs at most 2^18 − 1 sessions: a layout with 2^T > 2^seqBits + 2^18 (checked) cannot let the
 * fetches of one interval reach the era above theirs. No guard in the fast path, no compare-and-swap, and no
 * clock has to be monotonic. (The naive design — the counter is the id and a catch-up stores "now" into it
 * without the shard field as a tripwire between sequence and time — hands out an id twice when fast paths count
 * past the catch-up's target between its read and its store; test/postgres/generator.catch-up-race.test.ts
 * builds that race and shows both outcomes.)
 *
 * INCREASING in call order: every value handed out is greater than every value handed out before it (above).
 *
 * RUN-AHEAD. Each era holds 2^seqBits ids; above that many per tick, the next era is era + 1 even when the clock
 * has not moved, so the time bits run ahead of the clock by (ids issued beyond the clock's pace) / 2^seqBits
 * ticks, and fall back to the clock when demand drops (measured in `bench sql`, tested in
 * test/postgres/generator.clock-step-back.test.ts).
 *
 * COST. The fast path is one expression: per id one nextval (the only relation it touches, as with bigserial), a
 * clock read, one currval (session-local) and the keep check, which is one expression of v:
 * ((v − (now << T)) & M) = shard << S, with M the shard field's bits and the sign bit (negative exactly when
 * era < now) — 13 functions and operators, against 20 in version 2. PostgreSQL sets every function and operator
 * of an expression up again for each execution (a lookup and a privilege check each), so the count is the cost.
 * Where the expression lives decides who pays what (instructions per insert counted with callgrind on a
 * single-user PostgreSQL 18.4; docs/next-id.md, "Cost"):
 * - `plpgsql` (the default): `next_id()` is one call node to the planner, nothing to plan per statement; the
 *   call costs about 3,000 instructions (SPI connect, the function's state, a snapshot pushed for its volatile
 *   expression), and PL/pgSQL sets the expression up once per transaction. Simple protocol 1.18× bigserial's
 *   instructions, prepared 1.35×, bulk 1.32×.
 * - `sql`: a `RETURN` body the planner inlines into the statement, so no call at all (bulk 1.14×, prepared
 *   1.26×) — but the planner reads the stored body (4.4 kB of serialised expression), parses and simplifies it
 *   for every statement it plans: an unprepared single-row INSERT costs 3.5× bigserial's instructions, and
 *   every client that does not name its statements (psql, pgbench's default, node-postgres without `name`,
 *   Knex, Kysely, Drizzle, TypeORM) pays that. Hence `plpgsql` is the default and `sql` the choice for bulk
 *   loads and named prepared statements. No body does both: what makes the sql body free to call (the planner
 *   sees the expression) is what makes it costly to plan, and a body the planner cannot see must be called.
 *   (Measured and rejected: a variable instead of currval in PL/pgSQL — the second volatile expression pushes
 *   a second snapshot, cost the same; a non-inlined SQL function — 2.8× bulk even with PostgreSQL 18's plan
 *   cache; the expression written into the column default — 2× bigserial's instructions to plan.)
 * - `next_id_bulk()` (version 5): the `sql` body under another name, installed whatever `language` says, so that
 *   a statement that makes many ids, or runs prepared many times, can name it while the column's default stays
 *   `next_id()`: `INSERT INTO t (id, v) SELECT next_id_bulk(), … FROM …`. Same counter, same expression, same slow
 *   path: the argument above covers every mix of the two. Why the default itself cannot be as cheap in bulk, per
 *   row of a bulk insert (callgrind, PostgreSQL 18.4, 60,000 rows): bigserial 15,600 instructions; `next_id()` in
 *   PL/pgSQL 20,600, of which the call is 7,600 — nextval 2,450 (bigserial pays it too), the rest of the
 *   expression 2,700 (currval 920, date_part 745 of which 305 recompute the Unix epoch, the arithmetic), and
 *   2,450 the PL/pgSQL call itself (function lookup 350, its state 550, SPI connect and finish 550, memory
 *   contexts and resource owner 800, a snapshot pushed for the volatile expression). The call's share is what
 *   no body can drop: it is PL/pgSQL's, and a VOLATILE function must be VOLATILE (a STABLE one, 2% cheaper, can
 *   be duplicated by the planner: `SELECT id, id FROM (SELECT next_id() AS id) s` would make two ids). Measured
 *   and rejected there: `lastval()` for `currval` (its privilege check costs the same: +0.4%), the clock as an
 *   interval from the epoch (−300 instructions, −1.5%: not worth a new version on its own).
 *
 * TIME. The clock is `clock_timestamp()` (not `now()`, which is frozen for a whole transaction). A test-only
 * install (`testClock: true`) reads it through `<schema>.next_id_clock_ms()` instead, so that tests can replace
 * it and step time backwards, and calls `<schema>.next_id_test_pause()` inside the slow path's window (its slow
 * path is the shared body's test variant, the same text but for those two calls: a test holds it to that); the
 * production SQL contains no such indirection.
 */

/** Recorded in the schema (comment on `next_id()`); a newer install upgrades an older one in place. */
export const GENERATOR_VERSION = 6;

/** SQLSTATE raised when a schema already holds a generator for another shard/layout, or a newer version. */
export const GENERATOR_MISMATCH_SQLSTATE = 'SF002';

/** Names of the objects installed into a shard's schema. */
export const GENERATOR_OBJECTS = {
  counter: 'next_id_counter',
  nextId: 'next_id',
  nextIdBulk: 'next_id_bulk',
  newEra: 'next_id_new_era',
  catchUp: 'next_id_catch_up',
  lastIssued: 'next_id_last_issued',
  clock: 'next_id_clock_ms',
  testPause: 'next_id_test_pause',
  idToTimestamp: 'id_to_timestamp',
  idToShard: 'id_to_shard',
  timestampToMinId: 'timestamp_to_min_id',
} as const;

/** Objects of version 1 (a seqlock guard in a second sequence) that an upgrade removes. */
const V1_OBJECTS = { guard: 'next_id_guard', targetOf: 'next_id_target_of' } as const;

/**
 * What `generatorSql` and `installGenerator` install: the schema, the shard, the layout and epoch, and the language
 * of `next_id()`.
 */
export interface GeneratorSqlOptions {
  /** The shard's schema (a plain identifier). */
  schema: string;
  /** The logical shard number; must fit the layout's shard field. */
  shard: number;
  /** A preset name or a layout with the fields time, shard, sequence, most significant first (default `instagram`). */
  layout?: string | Layout | LayoutSpec;
  /** Custom epoch in ms since 1970 (default: the layout's). */
  epoch?: number;
  /**
   * How `next_id()` is written (default `plpgsql`; re-installing with the other one switches in place, tables
   * untouched — both share the counter and the slow path):
   * - `plpgsql`: the expression inside PL/pgSQL — nothing to plan per statement, so unprepared statements (the
   *   simple protocol, unnamed statements: most clients and ORMs) cost about what a bigserial insert costs;
   * - `sql`: one expression the planner inlines — cheaper per id in bulk statements and named prepared
   *   statements, but every unprepared INSERT pays tens of µs to inline it.
   */
  language?: GeneratorLanguage;
  /**
   * Take over a `next_id()` in the schema that shardflake did not install, e.g. a hand-written one from the
   * Instagram post (default: refuse, naming this option). Tables that default to it keep their defaults and get
   * shardflake's ids from then on; call `next_id_catch_up(<largest id it issued>)` afterwards if its ids could be
   * ahead of the clock or of another layout.
   */
  replace?: boolean;
  /** Test-only: read the clock through a replaceable function and call a pause hook inside the catch-up. */
  testClock?: boolean;
}

/** The ways of writing `next_id()`, the default first. */
export const GENERATOR_LANGUAGES = ['plpgsql', 'sql'] as const;
/**
 * How `next_id()` is written: `plpgsql` (the default, cheapest for unprepared inserts) or `sql` (inlined by the
 * planner: cheapest for bulk loads and prepared statements). docs/next-id.md measures both.
 */
export type GeneratorLanguage = (typeof GENERATOR_LANGUAGES)[number];
/** The default: the cost of an unprepared single-row insert decides it (see COST at the top of this file). */
export const DEFAULT_GENERATOR_LANGUAGE: GeneratorLanguage = 'plpgsql';

/** Everything the SQL needs, derived from the layout (no shift is written anywhere else). */
export interface GeneratorSqlPlan {
  /** The shard's schema, validated as a plain identifier; `next_id()` is installed there. */
  readonly schema: string;
  /** The logical shard number written into every id's shard field. */
  readonly shard: number;
  /** The layout with the chosen epoch applied: exactly the fields time, shard, sequence. */
  readonly layout: Layout;
  /** True when the clock is read through a replaceable function (the `testClock` option; tests only). */
  readonly testClock: boolean;
  /** How `next_id()` is written: `plpgsql` (default) or `sql`. */
  readonly language: GeneratorLanguage;
  /** The layout's time field (the most significant). */
  readonly time: LayoutField;
  /** The layout's shard field, between time and sequence. */
  readonly shardField: LayoutField;
  /** The layout's sequence field (the least significant), fed by the schema's counter. */
  readonly sequence: LayoutField;
  /** Constant bits of every id of this shard (the shard field in place). */
  readonly fixedBits: bigint;
  /** Largest tick an id of this layout can carry as a non-negative bigint. */
  readonly maxTick: bigint;
}

function layoutOf(options: GeneratorSqlOptions): Layout {
  const base = resolveLayout(options.layout ?? 'instagram');
  if (options.epoch === undefined || options.epoch === base.epoch) return base;
  if (!Number.isSafeInteger(options.epoch) || options.epoch < 0) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `epoch must be whole milliseconds since 1970, not ${shown(options.epoch)}`,
    );
  }
  return withEpoch(base, options.epoch);
}

function languageOf(language: GeneratorLanguage | undefined): GeneratorLanguage {
  if (language === undefined) return DEFAULT_GENERATOR_LANGUAGE;
  if (!GENERATOR_LANGUAGES.includes(language)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `language must be one of ${GENERATOR_LANGUAGES.join(', ')}`,
    );
  }
  return language;
}

/** Validates the options and derives the constants of the generator. */
export function generatorPlan(options: GeneratorSqlOptions): GeneratorSqlPlan {
  expectObject(options, 'generator options');
  const schema = validateIdentifier(options.schema, 'schema');
  const layout = layoutOf(options);
  const [time, shardField, sequence, ...others] = layout.fields;
  const invalid = (why: string) =>
    new ShardflakeError('INVALID_LAYOUT', `layout ${JSON.stringify(layout.name)} ${why}`);
  if (
    time?.kind !== 'time' ||
    shardField?.kind !== 'shard' ||
    sequence?.kind !== 'sequence' ||
    others.length
  ) {
    throw invalid(
      'needs exactly the fields time, shard, sequence (most significant first) for an in-database generator',
    );
  }
  // The shard field is the tripwire between sequence and time (see the top of this file): between two stores the
  // counter advances by at most 2^seqBits + one per session + 1, and PostgreSQL runs at most 2^18 - 1 sessions.
  if (1n << BigInt(time.shift) <= (1n << BigInt(sequence.bits)) + (1n << 18n)) {
    throw invalid(
      `has ${shardField.bits} shard + ${sequence.bits} sequence bits; the in-database generator needs 2^(shard + sequence bits) > 2^sequence bits + 2^18`,
    );
  }
  const maxTick = layout.maxSignedTick;
  const shard = options.shard;
  if (!Number.isSafeInteger(shard) || shard < 0 || BigInt(shard) > shardField.max) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `shard ${shown(shard)} does not fit layout ${layout.name}'s ${shardField.bits}-bit shard field (0…${shardField.max})`,
    );
  }
  return Object.freeze({
    schema,
    shard,
    layout,
    testClock: options.testClock === true,
    language: languageOf(options.language),
    time,
    shardField,
    sequence,
    fixedBits: BigInt(shard) << BigInt(shardField.shift),
    maxTick,
  });
}

/** What the install records in the schema, so a re-install can tell "same generator" from "another shard". */
export function generatorSignature(plan: GeneratorSqlPlan): string {
  const fields = plan.layout.fields.map((f) => `${f.name}:${f.kind}:${f.bits}`).join(',');
  return JSON.stringify({
    shardflake: 'generator',
    version: GENERATOR_VERSION,
    shard: plan.shard,
    layout: plan.layout.name,
    epoch: plan.layout.epoch,
    timeUnitMs: plan.layout.timeUnitMs,
    fields,
  });
}

const int8 = (n: bigint) => `(${BigInt.asIntN(64, n)})::bigint`;

/** SQL boolean: counter value `v` (an expression evaluated once) is keepable at tick `now` (see COST at the top). */
export function keepable(plan: GeneratorSqlPlan, v: string, now: string): string {
  return keepCheck(v, now, `${plan.time.shift}`, int8(keepMask(plan)), int8(plan.fixedBits));
}

/** The shard field's bits and the sign bit: (v - now's first id) is negative exactly when v's era is behind. */
function keepMask(plan: GeneratorSqlPlan): bigint {
  return (plan.shardField.max << BigInt(plan.shardField.shift)) | (1n << 63n);
}

/** SQL expression: the first id (sequence 0) of tick `era` on this shard. */
function firstIdOf(plan: GeneratorSqlPlan, era: string): string {
  return `((${era}) << ${plan.time.shift}) | ${int8(plan.fixedBits)}`;
}

/** SQL expression: the current tick (whole time units since the layout's epoch), from the given ms expression. */
function tickExpr(plan: GeneratorSqlPlan, ms: string): string {
  const { epoch, timeUnitMs } = plan.layout;
  return tickOf(ms, `${epoch}::float8`, timeUnitMs === 1 ? null : `${timeUnitMs}::float8`);
}

function clockMs(plan: GeneratorSqlPlan): string {
  return plan.testClock ? `${qualified(plan.schema, GENERATOR_OBJECTS.clock)}()` : SYSTEM_CLOCK_MS;
}

/** The fast path: keep nextval's value if it is keepable, else catch up. */
function fastPath(plan: GeneratorSqlPlan): string {
  const counter = qualified(plan.schema, GENERATOR_OBJECTS.counter);
  const lit = `${quoteLiteral(counter)}::regclass`;
  const now = tickExpr(plan, clockMs(plan));
  return `CASE
    WHEN ${keepable(plan, `pg_catalog.nextval(${lit})`, now)}
    THEN pg_catalog.currval(${lit})
    ELSE ${qualified(plan.schema, GENERATOR_OBJECTS.newEra)}()
  END`;
}

/**
 * The slow path's two entry points in the shard's schema, each one call of the shared slow path
 * (slow-path-sql.ts) with this shard's constants, and no slow path of its own to compile:
 * - `next_id_new_era()`, what next_id() calls: SECURITY DEFINER, so that a role allowed to insert (USAGE on the
 *   counter for nextval) does not also need UPDATE on it for the setval; it takes no argument and can only move
 *   the era to max(now, era + 1), so it gives such a role no new power. Its search_path is pinned
 *   (pg_catalog, pg_temp) so that no one's operators or functions can stand in for the built-in ones — in it and
 *   in the shared body, which is planned under that path.
 * - `next_id_catch_up(above_id)`, for `ensureGeneratorAbove` (shard moves): also moves past `above_id`; it runs
 *   with the caller's rights, so only a role that may setval the counter can call it usefully.
 * Written both ways, SQL and PL/pgSQL; the install picks by server version (slowPathInstallSql says why). An SQL
 * function that is SECURITY DEFINER or has SET is never inlined: each stays one call.
 */
function slowPathEntry(plan: GeneratorSqlPlan, withAbove: boolean): SlowPathEntry {
  const counter = qualified(plan.schema, GENERATOR_OBJECTS.counter);
  const constants = {
    counter: quoteLiteral(counter),
    shift: plan.time.shift,
    eraUnit: int8(1n << BigInt(plan.time.shift)),
    keepMask: int8(keepMask(plan)),
    shardBits: int8(plan.fixedBits),
    epochMs: plan.layout.epoch,
    unitMs: plan.layout.timeUnitMs,
    layout: plan.layout.name,
  };
  const signature = withAbove
    ? `${qualified(plan.schema, GENERATOR_OBJECTS.catchUp)}(above_id bigint DEFAULT NULL)`
    : `${qualified(plan.schema, GENERATOR_OBJECTS.newEra)}()`;
  const call = slowPathCall(
    plan.testClock,
    constants,
    withAbove ? { timeMax: int8(plan.time.max), aboveId: 'above_id' } : undefined,
  );
  const head = (language: string) => `CREATE OR REPLACE FUNCTION ${signature} RETURNS bigint
  LANGUAGE ${language} VOLATILE PARALLEL UNSAFE${withAbove ? '' : ' SECURITY DEFINER'}
  SET search_path = pg_catalog, pg_temp`;
  return {
    sql: `${head('sql')}
  RETURN ${call}`,
    plpgsql: `${head('plpgsql')}
AS $shardflake$
BEGIN
  RETURN ${call};
END
$shardflake$`,
  };
}

/**
 * PL/pgSQL that reads what the schema's `next_id()` says of itself. Needs the variables `comment text`,
 * `present boolean` and `existing jsonb` (not `found`, which would hide PL/pgSQL's FOUND). Sets `present` when
 * there is a `next_id()` at all, and `existing` to its signature when shardflake installed it (a JSON comment
 * with "shardflake": "generator"), else NULL. No arguments is written `proargtypes = ''`, not `pronargs = 0`:
 * then name, arguments and schema are the whole key of pg_proc's index, one entry, where the name alone walked
 * every schema's `next_id` (an install runs this twice per shard).
 */
function readInstalledSignature(plan: GeneratorSqlPlan): string {
  return `  SELECT pg_catalog.obj_description(p.oid, 'pg_proc') INTO comment FROM pg_catalog.pg_proc p
  WHERE p.pronamespace = ${quoteLiteral(plan.schema)}::regnamespace
    AND p.proname = ${quoteLiteral(GENERATOR_OBJECTS.nextId)} AND p.proargtypes = ''::pg_catalog.oidvector;
  present := FOUND;
  IF comment LIKE '{%' THEN
    BEGIN
      existing := comment::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
      existing := NULL;
    END;
  END IF;
  IF existing->>'shardflake' IS DISTINCT FROM 'generator' THEN
    existing := NULL;
  END IF;`;
}

/**
 * Versions 1 and 2 kept other counters (1: the id without its shard bits; 2: sequence · 2^eraBits + era, stepping
 * by 2^eraBits); from version 3 on the counter holds the id, and an upgrade replaces functions only. (Up to
 * version 4 this check let version 3 through as if it were version 2: its counter, read as an era, moved the next
 * ids years ahead of the clock. Tested now: test/postgres/generator.install.test.ts.) Converting one waits for every transaction that called the old next_id() (ALTER SEQUENCE
 * conflicts with nextval's lock), then stores the first id of the tick after the last one the old counter
 * reached, so every new id is above every old one. (A statement already running the old expression when this
 * commits finds the converted counter far outside what it would keep, and takes the new slow path.)
 */
function upgradeFromOlder(plan: GeneratorSqlPlan): string {
  const counter = qualified(plan.schema, GENERATOR_OBJECTS.counter);
  const v2EraMask = (1n << BigInt(plan.maxTick.toString(2).length)) - 1n;
  return `DO $shardflake$
DECLARE
  comment text;
  present boolean;
  existing jsonb;
  installed int;
  last bigint;
  called boolean;
  tick bigint;
BEGIN
${readInstalledSignature(plan)}
  -- The version of the shardflake generator found here, NULL when there is none.
  installed := (existing->>'version')::int;
  -- Versions 3 and later keep the id itself in the counter: nothing to convert.
  IF installed IS NULL OR installed >= 3 THEN
    RETURN;
  END IF;
  ALTER SEQUENCE ${counter} INCREMENT BY 1 MINVALUE 0 MAXVALUE ${(1n << 63n) - 1n};
  SELECT last_value, is_called INTO last, called FROM ${counter};
  IF called THEN
    tick := CASE installed WHEN 1 THEN last >> ${plan.time.shift} ELSE last & ${int8(v2EraMask)} END;
    PERFORM pg_catalog.setval(${quoteLiteral(counter)}::regclass, ${firstIdOf(plan, 'tick + 1')}, true);
  END IF;
END
$shardflake$`;
}

/**
 * The SQL that installs (or upgrades in place) the generator and helpers into `options.schema`. Idempotent;
 * runs inside the caller's transaction (it contains no BEGIN/COMMIT) — wrap it in one when running it alone.
 */
export function generatorSql(options: GeneratorSqlOptions): string {
  const { objects, seal } = generatorSqlParts(options);
  return objects + seal;
}

/**
 * The install in two parts, to run in this order in one transaction: `objects` (checks, counter, functions) and
 * `seal` (the signature comment on `next_id()`, which later installs read).
 *
 * Why two: every statement that names a function (COMMENT ON FUNCTION, a DEFAULT next_id()) makes PostgreSQL
 * list the functions of that name in *every* schema, and any CREATE FUNCTION throws those lists away, so on a
 * server with thousands of shards each lookup after a CREATE FUNCTION reads thousands of catalog rows. `cluster
 * init` creates the objects of a whole batch of shards first and then seals them and creates their tables, so
 * the `next_id` list is read once per batch instead of twice per shard.
 */
export function generatorSqlParts(options: GeneratorSqlOptions): { objects: string; seal: string } {
  const plan = generatorPlan(options);
  const o = GENERATOR_OBJECTS;
  const s = quoteIdent(plan.schema, 'schema');
  const q = (name: string) => qualified(plan.schema, name);
  const counter = q(o.counter);
  const { time, shardField, layout } = plan;
  const signature = generatorSignature(plan);

  const statements: string[] = [];
  // Serialises concurrent installs into the same schema (CREATE … IF NOT EXISTS is not race-free); released at
  // commit. Keyed by the schema name, so a cluster creating many shards in parallel is not serialised by it.
  statements.push(
    `DO $shardflake$ BEGIN PERFORM pg_catalog.pg_advisory_xact_lock(x'5346'::int, pg_catalog.hashtext(${quoteLiteral(plan.schema)})); END $shardflake$`,
  );
  statements.push(`CREATE SCHEMA IF NOT EXISTS ${s}`);
  // Refuse to replace a next_id() that shardflake did not install (unless told to), to turn one shard's generator
  // into another's, or to downgrade a newer install. ('guard' was part of version 1's signature.)
  statements.push(`DO $shardflake$
DECLARE
  comment text;
  present boolean;
  existing jsonb;
  wanted jsonb := ${quoteLiteral(signature)}::jsonb;
BEGIN
${readInstalledSignature(plan)}
  IF NOT present THEN
    RETURN;
  END IF;
  IF existing IS NULL THEN
${
  options.replace === true
    ? `    RAISE NOTICE 'taking over the next_id() in schema %, which shardflake did not install', ${quoteLiteral(plan.schema)};
    RETURN;`
    : `    RAISE EXCEPTION 'schema % has a next_id() that shardflake did not install; to take it over, install with --replace (library: replace: true)',
      ${quoteLiteral(plan.schema)}
      USING ERRCODE = '${GENERATOR_MISMATCH_SQLSTATE}';`
}
  END IF;
  IF (existing->>'version')::int > (wanted->>'version')::int THEN
    RAISE EXCEPTION 'schema % has generator version %, newer than this install (%)',
      ${quoteLiteral(plan.schema)}, existing->>'version', wanted->>'version'
      USING ERRCODE = '${GENERATOR_MISMATCH_SQLSTATE}';
  END IF;
  IF (existing - 'version' - 'guard') IS DISTINCT FROM (wanted - 'version') THEN
    RAISE EXCEPTION 'schema % already has a generator for shard % (layout %, epoch %), not shard % (layout %, epoch %)',
      ${quoteLiteral(plan.schema)}, existing->>'shard', existing->>'layout', existing->>'epoch',
      wanted->>'shard', wanted->>'layout', wanted->>'epoch'
      USING ERRCODE = '${GENERATOR_MISMATCH_SQLSTATE}';
  END IF;
END
$shardflake$`);
  statements.push(
    `CREATE SEQUENCE IF NOT EXISTS ${counter} AS bigint INCREMENT 1 MINVALUE 0 START 0 CACHE 1 NO CYCLE`,
  );
  statements.push(upgradeFromOlder(plan));
  statements.push(
    `COMMENT ON SEQUENCE ${counter} IS ${quoteLiteral(
      'shardflake id counter: the last id handed out (or past it); only next_id() and its slow path may touch it',
    )}`,
  );
  if (plan.testClock) {
    // Test-only time source and pause hook: tests replace these functions. Not part of the production SQL.
    statements.push(`CREATE OR REPLACE FUNCTION ${q(o.clock)}() RETURNS float8
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  RETURN ${SYSTEM_CLOCK_MS}`);
    statements.push(`CREATE OR REPLACE FUNCTION ${q(o.testPause)}() RETURNS void
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  BEGIN ATOMIC END`);
  }
  // The shared slow path, then the shard's two entry points into it.
  statements.push(
    slowPathInstallSql(plan.testClock, [slowPathEntry(plan, false), slowPathEntry(plan, true)]),
  );
  statements.push(
    plan.language === 'sql'
      ? `CREATE OR REPLACE FUNCTION ${q(o.nextId)}() RETURNS bigint
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  RETURN ${fastPath(plan)}`
      : `CREATE OR REPLACE FUNCTION ${q(o.nextId)}() RETURNS bigint
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $shardflake$
BEGIN
  RETURN ${fastPath(plan)};
END
$shardflake$`,
  );
  // The inlined body for statements that make many ids (see COST at the top), whatever `language` is.
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.nextIdBulk)}() RETURNS bigint
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  RETURN ${fastPath(plan)}`);
  // ≥ every id handed out (the counter only grows, see the top of this file), NULL before the first.
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.lastIssued)}() RETURNS bigint
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  BEGIN ATOMIC
    SELECT CASE WHEN is_called THEN last_value END FROM ${counter};
  END`);
  // Version 1's objects, unused since (their dependants were replaced above).
  // (Checked first rather than DROP … IF EXISTS, which prints a notice on every fresh install.)
  statements.push(`DO $shardflake$
BEGIN
  IF pg_catalog.to_regprocedure(${quoteLiteral(`${q(V1_OBJECTS.targetOf)}(bigint)`)}) IS NOT NULL THEN
    DROP FUNCTION ${q(V1_OBJECTS.targetOf)}(bigint);
  END IF;
  IF pg_catalog.to_regclass(${quoteLiteral(q(V1_OBJECTS.guard))}) IS NOT NULL THEN
    DROP SEQUENCE ${q(V1_OBJECTS.guard)};
  END IF;
END
$shardflake$`);

  const timeOf = (id: string) => `(${id} >> ${time.shift})`;
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.idToTimestamp)}(id bigint) RETURNS timestamptz
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN 'epoch'::timestamptz + ((${timeOf('id')} * ${layout.timeUnitMs} + ${layout.epoch}) * interval '1 millisecond')`);
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.idToShard)}(id bigint) RETURNS integer
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN ((id >> ${shardField.shift}) & ${shardField.max})::integer`);
  // The smallest id whose time field is the tick containing `ts` (any shard): for `WHERE id >= …` ranges.
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.timestampToMinId)}(ts timestamptz) RETURNS bigint
  LANGUAGE sql STABLE STRICT PARALLEL SAFE
  RETURN GREATEST(0::numeric, LEAST(${layout.maxSignedTick}::numeric,
    pg_catalog.floor((EXTRACT(epoch FROM ts) * 1000 - ${layout.epoch}) / ${layout.timeUnitMs})))::bigint << ${time.shift}`);
  return {
    objects: `${statements.join(';\n\n')};\n\n`,
    seal: `COMMENT ON FUNCTION ${q(o.nextId)}() IS ${quoteLiteral(signature)};\n`,
  };
}

import { ShardflakeError } from '../errors.js';
import { type Layout, type LayoutField, type LayoutSpec, resolveLayout, withEpoch } from '../ids/layout.js';
import { qualified, quoteIdent, quoteLiteral, validateIdentifier } from './identifier.js';

/*
 * The id generator that runs inside PostgreSQL, one per logical shard (schema).
 *
 * STATE. One sequence, `next_id_counter` (CACHE 1), holds the pair (era, sequence) as c = sequence · 2^T + era:
 * the era is a tick (whole time units since the layout's epoch) in the low T bits, T wide enough for every tick
 * an id can carry; the sequence is in the bits above it, and the sequence's INCREMENT is 2^T. So `nextval` — an
 * atomic fetch-and-add that no transaction can roll back — adds one to the sequence and NEVER changes the era:
 * a sequence that outgrows the id's sequence field runs into the sign bit (an error), not into the time bits. The
 * id handed out for c is (era, sequence) put into the layout's time and sequence fields, plus the shard bits.
 *
 * FAST PATH (inlined SQL, no lock, one relation). v := nextval; keep v if its sequence fits the id's field and
 * its era is not behind the clock (era ≥ now — also true after the server clock stepped back: ids then keep
 * increasing from the era). Otherwise v is discarded (a gap in the ids, never a duplicate) and the catch-up runs.
 *
 * CATCH-UP (PL/pgSQL, about once per tick, or once per 2^seqBits ids when demand outruns the clock). Under a
 * session-level advisory lock on the schema's key (released before it returns, and in its exception handler —
 * never held until commit):
 *    v := nextval; if v is keepable, return it (another catch-up already moved the counter);
 *    else start a new era: e' := max(now, era(v) + 1), setval(counter, e', is_called = true) — the pair (e', 0) —
 *    and return the id of (e', 0).
 *
 * WHY NO ID IS HANDED OUT TWICE. Every counter value belongs to the era of the store (setval) that began it:
 * nextval never changes the era, so the values fetched between one store and the next are distinct pairs of
 * that store's era. Stores happen only inside catch-ups, one at a time (the key), and each store's era is
 * greater than the era it read after taking the key, which is the era of the previous store (the counter's era
 * is always the last store's era). So eras only grow, each era is begun by exactly one store, and two handed-out
 * values in the same era come from the same store and differ in sequence. This is true however the sessions
 * interleave: a session that fetched a value of the old era just before a store still keeps an old-era pair,
 * which the new era cannot produce. No guard is needed in the fast path, and no clock has to be monotonic.
 * (The naive design — the counter is the id without its shard bits and a catch-up stores "now" into it — hands
 * out an id twice when fast paths keep incrementing past the catch-up's target between its read and its store;
 * test/postgres/generator.catch-up-race.test.ts builds that race and shows both outcomes.)
 *
 * INCREASING in call order: a call that starts after another returned fetches later; within an era later
 * fetches have larger sequences, and a later era is a larger tick. The id's time field is above its sequence
 * field (checked), so ids order like (era, sequence).
 *
 * RUN-AHEAD. Each era holds 2^seqBits ids; above that many per tick, the next era is era + 1 even when the clock
 * has not moved, so the time bits run ahead of the clock by (ids issued beyond the clock's pace) / 2^seqBits
 * ticks, and fall back to the clock when demand drops (measured in `bench sql`, tested in
 * test/postgres/generator.clock-step-back.test.ts).
 *
 * COST. `next_id()` is a SQL-language function whose body is one expression (`RETURN …`, parsed at creation so
 * the caller's search_path cannot change it), so the planner inlines it into the INSERT: no function call, no
 * PL/pgSQL, and per id one nextval (the only relation it touches, as with bigserial), a clock read, two currval
 * (session-local) and bit arithmetic. The keep check is one expression of v: with K the mask of the era bits
 * and of the bits above the id's sequence field, ((v & K) − now) >> T is 0 exactly when the sequence fits
 * (otherwise v & K ≥ 2^(T+seqBits)) and 0 ≤ era − now < 2^T.
 * The price of inlining is paid when a statement is planned: the planner expands and simplifies the expression
 * for every statement it plans, which for an unprepared single-row INSERT costs more than the insert itself on a
 * fast server. `language: 'plpgsql'` wraps the same expression in PL/pgSQL (planned once per session) for
 * workloads of unprepared single-row inserts; `bench sql` measures both ways.
 *
 * TIME. The clock is `clock_timestamp()` (not `now()`, which is frozen for a whole transaction). A test-only
 * install (`testClock: true`) reads it through `<schema>.next_id_clock_ms()` instead, so that tests can replace
 * it and step time backwards, and calls `<schema>.next_id_test_pause()` inside the catch-up's window; the
 * production SQL contains no such indirection.
 */

/** Recorded in the schema (comment on `next_id()`); a newer install upgrades an older one in place. */
export const GENERATOR_VERSION = 2;

/** SQLSTATE raised when a schema already holds a generator for another shard/layout, or a newer version. */
export const GENERATOR_MISMATCH_SQLSTATE = 'SF002';

/** Names of the objects installed into a shard's schema. */
export const GENERATOR_OBJECTS = {
  counter: 'next_id_counter',
  nextId: 'next_id',
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

export interface GeneratorSqlOptions {
  /** The shard's schema (a plain identifier). */
  schema: string;
  /** The logical shard number; must fit the layout's shard field. */
  shard: number;
  /** A preset name or a layout with `shard` and `sequence` fields (default `instagram`). */
  layout?: string | Layout | LayoutSpec;
  /** Custom epoch in ms since 1970 (default: the layout's). */
  epoch?: number;
  /**
   * How `next_id()` is written (default `sql`; re-installing with the other one switches in place):
   * - `sql`: one inlined expression — the cheapest per id (bulk statements, prepared statements), but the planner
   *   inlines it again for every statement it plans, which costs tens of µs per unprepared INSERT;
   * - `plpgsql`: the same expression inside PL/pgSQL — about 0.25 µs more per id, nothing extra to plan.
   */
  language?: GeneratorLanguage;
  /** Test-only: read the clock through a replaceable function and call a pause hook inside the catch-up. */
  testClock?: boolean;
}

export const GENERATOR_LANGUAGES = ['sql', 'plpgsql'] as const;
export type GeneratorLanguage = (typeof GENERATOR_LANGUAGES)[number];

/** Everything the SQL needs, derived from the layout (no shift is written anywhere else). */
export interface GeneratorSqlPlan {
  readonly schema: string;
  readonly shard: number;
  readonly layout: Layout;
  readonly testClock: boolean;
  readonly language: GeneratorLanguage;
  readonly time: LayoutField;
  readonly shardField: LayoutField;
  readonly sequence: LayoutField;
  /** Constant bits of every id of this shard (the shard field in place). */
  readonly fixedBits: bigint;
  /** Width of the era (tick) part of the counter: enough bits for the largest tick an id can carry. */
  readonly eraBits: number;
  /** Largest tick an id of this layout can carry as a non-negative bigint. */
  readonly maxTick: bigint;
}

function layoutOf(options: GeneratorSqlOptions): Layout {
  const base = resolveLayout(options.layout ?? 'instagram');
  if (options.epoch === undefined || options.epoch === base.epoch) return base;
  if (!Number.isSafeInteger(options.epoch) || options.epoch < 0) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `epoch must be whole milliseconds since 1970, not ${String(options.epoch)}`,
    );
  }
  return withEpoch(base, options.epoch);
}

function languageOf(language: GeneratorLanguage | undefined): GeneratorLanguage {
  if (language === undefined) return 'sql';
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
  const schema = validateIdentifier(options.schema, 'schema');
  const layout = layoutOf(options);
  const shardField = layout.fields.find((f) => f.kind === 'shard');
  const sequence = layout.sequence;
  const invalid = (why: string) =>
    new ShardflakeError('INVALID_LAYOUT', `layout ${JSON.stringify(layout.name)} ${why}`);
  if (!shardField || !sequence) {
    throw invalid('needs a shard field and a sequence field for an in-database generator');
  }
  const others = layout.fields.filter((f) => f !== layout.time && f !== shardField && f !== sequence);
  if (others.length > 0) {
    throw invalid(
      `has fields (${others.map((f) => f.name).join(', ')}) the in-database generator cannot fill; use time, shard and sequence only`,
    );
  }
  if (sequence.shift > layout.time.shift) {
    throw invalid('puts the sequence above the time; ids would not sort by time');
  }
  const maxTick = layout.maxSignedTick;
  const eraBits = maxTick.toString(2).length;
  // The counter's sequence part needs at least one bit more than the id's field, so that a full field is seen.
  if (eraBits + sequence.bits > 62) {
    throw invalid(
      `leaves no room in a bigint counter for a ${eraBits}-bit tick and a ${sequence.bits}-bit sequence`,
    );
  }
  const shard = options.shard;
  if (!Number.isSafeInteger(shard) || shard < 0 || BigInt(shard) > shardField.max) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `shard ${String(shard)} does not fit layout ${layout.name}'s ${shardField.bits}-bit shard field (0…${shardField.max})`,
    );
  }
  return Object.freeze({
    schema,
    shard,
    layout,
    testClock: options.testClock === true,
    language: languageOf(options.language),
    time: layout.time,
    shardField,
    sequence,
    fixedBits: BigInt(shard) << BigInt(shardField.shift),
    eraBits,
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

/** The counter's increment: one step of the sequence part, above the era. */
const step = (plan: GeneratorSqlPlan) => 1n << BigInt(plan.eraBits);
const eraMask = (plan: GeneratorSqlPlan) => step(plan) - 1n;

/** SQL boolean: counter value `v` (an expression evaluated once) is keepable at tick `now`. */
function keepable(plan: GeneratorSqlPlan, v: string, now: string): string {
  // K: the era bits and every bit above the id's sequence field (see COST at the top).
  const k = eraMask(plan) | ~((1n << BigInt(plan.eraBits + plan.sequence.bits)) - 1n);
  return `(((${v} & ${int8(k)}) - ${now}) >> ${plan.eraBits}) = 0`;
}

/** SQL expression: the id of the counter pair whose era is `era` and whose sequence is `seq`. */
function idOf(plan: GeneratorSqlPlan, era: string, seq: string): string {
  const seqPart = plan.sequence.shift === 0 ? `(${seq})` : `((${seq}) << ${plan.sequence.shift})`;
  return `((${era}) << ${plan.time.shift}) | ${plan.fixedBits}::bigint | ${seqPart}`;
}

/** SQL expression: the id of counter value `c` (may be evaluated twice, so pass something stable). */
function idOfCounter(plan: GeneratorSqlPlan, c: string): string {
  return idOf(plan, `${c} & ${int8(eraMask(plan))}`, `${c} >> ${plan.eraBits}`);
}

/** SQL expression: the current tick (whole time units since the layout's epoch), from the given ms expression. */
function tickExpr(plan: GeneratorSqlPlan, ms: string): string {
  const sinceEpoch = `(${ms} - ${plan.layout.epoch}::float8)`;
  const units =
    plan.layout.timeUnitMs === 1 ? sinceEpoch : `(${sinceEpoch} / ${plan.layout.timeUnitMs}::float8)`;
  return `pg_catalog.floor(${units})::bigint`;
}

/** Milliseconds since 1970 as float8: `date_part` stays float8 on every version (extract is numeric since 14). */
const SYSTEM_CLOCK_MS = `(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8)`;

function clockMs(plan: GeneratorSqlPlan): string {
  return plan.testClock ? `${qualified(plan.schema, GENERATOR_OBJECTS.clock)}()` : SYSTEM_CLOCK_MS;
}

/** Advisory-lock key of a schema's generator: 'SF' in the high 32 bits, the counter's OID in the low. */
function lockKey(counter: string): string {
  return `((x'5346'::bigint << 32) | ${quoteLiteral(counter)}::regclass::oid::bigint)`;
}

/** The fast path: keep nextval's value if it is keepable, else catch up. */
function fastPath(plan: GeneratorSqlPlan): string {
  const counter = qualified(plan.schema, GENERATOR_OBJECTS.counter);
  const lit = `${quoteLiteral(counter)}::regclass`;
  const now = tickExpr(plan, clockMs(plan));
  return `CASE
    WHEN ${keepable(plan, `pg_catalog.nextval(${lit})`, now)}
    THEN ${idOfCounter(plan, `pg_catalog.currval(${lit})`)}
    ELSE ${qualified(plan.schema, GENERATOR_OBJECTS.newEra)}()
  END`;
}

/** Test-only: a replaceable pause inside the catch-up's window, so that tests can hold the window open. */
function testPause(plan: GeneratorSqlPlan): string {
  return plan.testClock ? `    PERFORM ${qualified(plan.schema, GENERATOR_OBJECTS.testPause)}();\n` : '';
}

/**
 * The catch-up (see the top of this file), in two entry points made from one body:
 * - `next_id_new_era()`, what next_id() calls: SECURITY DEFINER, so that a role allowed to insert (USAGE on the
 *   counter for nextval) does not also need UPDATE on it for the setval; it takes no argument and can only move
 *   the era to max(now, era + 1), so it gives such a role no new power. Its search_path is pinned
 *   (pg_catalog, pg_temp) so that no one's operators or functions can stand in for the built-in ones.
 * - `next_id_catch_up(above_id)`, for `ensureGeneratorAbove` (shard moves): also moves past `above_id`; it runs
 *   with the caller's rights, so only a role that may setval the counter can call it usefully.
 */
function catchUpSql(plan: GeneratorSqlPlan, withAbove: boolean): string {
  const counter = qualified(plan.schema, GENERATOR_OBJECTS.counter);
  const lit = `${quoteLiteral(counter)}::regclass`;
  const now = tickExpr(plan, clockMs(plan));
  const signature = withAbove
    ? `${qualified(plan.schema, GENERATOR_OBJECTS.catchUp)}(above_id bigint DEFAULT NULL)`
    : `${qualified(plan.schema, GENERATOR_OBJECTS.newEra)}()`;
  const rights = withAbove ? '' : '\n  SECURITY DEFINER SET search_path = pg_catalog, pg_temp';
  const aboveKeep = withAbove ? ` AND (above_id IS NULL OR above_id < ${idOfCounter(plan, 'c')})` : '';
  const aboveEra = withAbove
    ? `, COALESCE(((above_id >> ${plan.time.shift}) & ${int8(plan.time.max)}) + 1, 0)`
    : '';
  // Few statements on purpose: PL/pgSQL sets each expression up again in every transaction, and this runs in
  // the first insert of every tick.
  return `CREATE OR REPLACE FUNCTION ${signature} RETURNS bigint
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE${rights}
AS $shardflake$
-- The slow path of next_id(): see the correctness argument in shardflake's src/postgres/generator-sql.ts.
DECLARE
  lock_key constant bigint := ${lockKey(counter)};
  c bigint;
  era bigint;
  id bigint;
  -- Results assigned instead of PERFORMed: PL/pgSQL evaluates an assignment as a simple expression, several times
  -- cheaper than PERFORM's full statement.
  locked text;
  released boolean;
BEGIN
  locked := pg_catalog.pg_advisory_lock(lock_key)::text;
  BEGIN
    c := pg_catalog.nextval(${lit});
${testPause(plan)}    IF ${keepable(plan, 'c', now)}${aboveKeep} THEN
      -- Another slow path already started a new era: keep the value, as the fast path would.
      id := ${idOfCounter(plan, 'c')};
    ELSE
      -- A new era: after the clock, and after the era read under the key (so eras only grow).
      era := GREATEST(${now}, (c & ${int8(eraMask(plan))}) + 1${aboveEra});
      IF era > ${plan.maxTick} THEN
        RAISE EXCEPTION 'shardflake generator in schema % is exhausted: tick % does not fit layout %',
          ${quoteLiteral(plan.schema)}, era, ${quoteLiteral(plan.layout.name)} USING ERRCODE = '22003';
      END IF;
      id := ${idOf(plan, `pg_catalog.setval(${lit}, era, true)`, '0')};
    END IF;
    released := pg_catalog.pg_advisory_unlock(lock_key);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(lock_key);
    RAISE;
  END;
  RETURN id;
END
$shardflake$`;
}

/**
 * Version 1 kept the id without its shard bits in the counter (increment: one sequence step). Converting it
 * waits for every transaction that called the old next_id() (ALTER SEQUENCE conflicts with nextval's lock), then
 * starts the counter at the era after the last tick version 1 reached, so every new id is above every old one.
 */
function upgradeFromV1(plan: GeneratorSqlPlan): string {
  const counter = qualified(plan.schema, GENERATOR_OBJECTS.counter);
  return `DO $shardflake$
DECLARE
  last bigint;
  called boolean;
BEGIN
  IF (SELECT seqincrement FROM pg_catalog.pg_sequence
      WHERE seqrelid = ${quoteLiteral(counter)}::regclass) = ${step(plan)} THEN
    RETURN;
  END IF;
  ALTER SEQUENCE ${counter} INCREMENT BY ${step(plan)} MINVALUE 0 MAXVALUE ${BigInt.asIntN(64, (1n << 63n) - 1n)};
  SELECT last_value, is_called INTO last, called FROM ${counter};
  IF called THEN
    PERFORM pg_catalog.setval(${quoteLiteral(counter)}::regclass, (last >> ${plan.time.shift}) + 1, true);
  END IF;
END
$shardflake$`;
}

/**
 * The SQL that installs (or upgrades in place) the generator and helpers into `options.schema`. Idempotent;
 * runs inside the caller's transaction (it contains no BEGIN/COMMIT) — wrap it in one when running it alone.
 */
export function generatorSql(options: GeneratorSqlOptions): string {
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
  // Refuse to turn one shard's generator into another's, or to downgrade a newer install. ('guard' was part of
  // version 1's signature.)
  statements.push(`DO $shardflake$
DECLARE
  installed text := (SELECT pg_catalog.obj_description(p.oid, 'pg_proc') FROM pg_catalog.pg_proc p
                     WHERE p.pronamespace = ${quoteLiteral(plan.schema)}::regnamespace
                       AND p.proname = ${quoteLiteral(o.nextId)} AND p.pronargs = 0);
  wanted jsonb := ${quoteLiteral(signature)}::jsonb;
  found jsonb;
BEGIN
  IF installed IS NULL OR installed NOT LIKE '{%' THEN RETURN; END IF;
  found := installed::jsonb;
  IF found->>'shardflake' IS DISTINCT FROM 'generator' THEN RETURN; END IF;
  IF (found->>'version')::int > (wanted->>'version')::int THEN
    RAISE EXCEPTION 'schema % has generator version %, newer than this install (%)',
      ${quoteLiteral(plan.schema)}, found->>'version', wanted->>'version'
      USING ERRCODE = '${GENERATOR_MISMATCH_SQLSTATE}';
  END IF;
  IF (found - 'version' - 'guard') IS DISTINCT FROM (wanted - 'version') THEN
    RAISE EXCEPTION 'schema % already has a generator for shard % (layout %, epoch %), not shard % (layout %, epoch %)',
      ${quoteLiteral(plan.schema)}, found->>'shard', found->>'layout', found->>'epoch',
      wanted->>'shard', wanted->>'layout', wanted->>'epoch'
      USING ERRCODE = '${GENERATOR_MISMATCH_SQLSTATE}';
  END IF;
END
$shardflake$`);
  statements.push(
    `CREATE SEQUENCE IF NOT EXISTS ${counter} AS bigint INCREMENT ${step(plan)} MINVALUE 0 START 0 CACHE 1 NO CYCLE`,
  );
  statements.push(upgradeFromV1(plan));
  statements.push(
    `COMMENT ON SEQUENCE ${counter} IS ${quoteLiteral(
      `shardflake id counter: sequence * 2^${plan.eraBits} + era (a tick); only next_id() and its catch-up may touch it`,
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
  statements.push(catchUpSql(plan, false));
  statements.push(catchUpSql(plan, true));
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
  statements.push(`COMMENT ON FUNCTION ${q(o.nextId)}() IS ${quoteLiteral(signature)}`);
  // ≥ every id handed out (a sequence past the id's field means that era's ids ended at its largest), NULL
  // before the first.
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.lastIssued)}() RETURNS bigint
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  BEGIN ATOMIC
    SELECT CASE WHEN is_called THEN ${idOf(
      plan,
      `last_value & ${int8(eraMask(plan))}`,
      `LEAST(last_value >> ${plan.eraBits}, ${plan.sequence.max})`,
    )} END FROM ${counter};
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
  return `${statements.join(';\n\n')};\n`;
}

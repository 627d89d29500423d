import { ShardflakeError } from '../errors.js';
import { type Layout, type LayoutField, type LayoutSpec, resolveLayout, withEpoch } from '../ids/layout.js';
import { qualified, quoteIdent, quoteLiteral, validateIdentifier } from './identifier.js';

/*
 * The id generator that runs inside PostgreSQL, one per logical shard (schema).
 *
 * STATE. One counter C = tick · 2^seqBits + seq, held in the sequence `next_id_counter` (CACHE 1). An id is C's
 * tick in the layout's time field, the shard in the shard field and C's low bits in the sequence field; that map
 * is strictly increasing in C, so ids are unique and ordered exactly when the counter values are. Because the
 * sequence field never wraps on its own (a full sequence carries into the tick), the seed's collision — more
 * than 2^seqBits ids in one millisecond repeat `nextval % 1024` — cannot happen: the time bits simply run ahead
 * of the clock for as long as demand stays above 2^seqBits ids per tick, and fall back to the clock after.
 *
 * FAST PATH (inlined SQL, no lock). `nextval` is an atomic fetch-and-add that no transaction can roll back, so
 * when the counter is at or ahead of the clock (tick(C) ≥ now) the fetched value is simply the next id. This is
 * also what happens after the server clock steps back: the counter is ahead, ids keep increasing from it.
 *
 * CATCH-UP (PL/pgSQL, rare: at most once per tick of real time). When the counter lags the clock it must jump
 * to now · 2^seqBits. A sequence has no fetch-and-max, only `setval`, an absolute store. "Read C, compare,
 * setval(T)" races with concurrent `nextval` callers: session A reads c, session B's `nextval` hands out c+1 …
 * c+k (k can be anything — A may be descheduled), A stores T; if c+k ≥ T, the values T+1 … c+k are handed out
 * a second time (and T itself if c+k = T). Taking turns among catch-up callers does not help, because the
 * values that get reissued belong to fast-path callers that took no turn.
 *
 * THE GUARD closes that window without making the fast path take a lock. It is a seqlock kept in a second
 * sequence, `next_id_guard`, whose value is read with `pg_sequence_last_value` (NULL while `is_called` is
 * false, which here means "a catch-up is in progress"). A catch-up, holding a session-level advisory lock so
 * that only one runs at a time (released before the function returns, and in its exception handler; never
 * held until commit), does:
 *    (1) guard := in progress (g+1, is_called = false)      → guard reads NULL
 *    (2) c := nextval(counter)                               → every value fetched before (1) is < c
 *    (3) if c < floor: setval(counter, floor); result floor  → later nextvals return > floor
 *    (4) guard := g+1 (is_called = true)
 * The fast path evaluates, in this order, g1 := guard, c := nextval(counter), g2 := guard, and keeps c only if
 * g1 = g2 (both non-NULL) and tick(c) ≥ now; otherwise it discards c (a gap, never a duplicate) and calls the
 * catch-up. Proof that a kept c cannot be reissued: the only store that moves the counter is (3). If c's
 * nextval came after some catch-up's (3), every value that catch-up makes the counter hand out again lies
 * below the stored value, which c exceeds. If c's nextval came before that catch-up's (2), c < the (2) value ≤
 * the stored floor, and the counter only hands out values above the floor afterwards. Otherwise c's nextval lies
 * between (1) and (3) of that catch-up: then g1 was read before c's nextval and g2 after, so either g1 was read
 * after (1) and before (4) — NULL, rejected — or g1 was read before (1) and g2 after (1) — g2 is NULL or a later
 * guard value ≠ g1, rejected. (Each sequence operation is atomic under the sequence's buffer lock, so all of
 * them fall in one total order.) The catch-up's own result is either its own nextval (2) or the floor it stored
 * in (3), which no one else can obtain: values before (2) are below it and values after (3) above it.
 * Increasing in call order: a call that starts after another returned fetches its counter value later, and the
 * counter only moves up (every store in (3) is above every value handed out before it).
 *
 * Evaluation order in the fast path is forced, not hoped for: g2's argument is a CASE over nextval's result
 * (data dependency), the clock check runs in a CASE branch after both, and g1 is the left operand of the same
 * `=` whose right operand contains the nextval (PostgreSQL evaluates an operator's arguments in order). The
 * catch-up's mutex is an advisory lock taken in the catch-up only; if the session dies inside it the lock goes
 * with the session and the next catch-up repairs a guard left in progress (it holds the mutex, so no other
 * catch-up is running).
 *
 * COST. `next_id()` is a SQL-language function whose body is a single expression, so the planner inlines it
 * into the INSERT (no function-call overhead, no PL/pgSQL interpreter): per id it does one nextval, two guard
 * reads, a clock read and bit arithmetic. Only the catch-up is PL/pgSQL.
 *
 * TIME. The clock is `clock_timestamp()` (not `now()`, which is frozen for a whole transaction). A test-only
 * install (`testClock: true`) reads it through `<schema>.next_id_clock_ms()` instead, so that tests can replace
 * it and step time backwards; the production SQL contains no such indirection.
 */

/** Recorded in the schema (comment on `next_id()`); a newer install upgrades an older one in place. */
export const GENERATOR_VERSION = 1;

/** SQLSTATE raised when a schema already holds a generator for another shard/layout, or a newer version. */
export const GENERATOR_MISMATCH_SQLSTATE = 'SF002';

/** Names of the objects installed into a shard's schema. */
export const GENERATOR_OBJECTS = {
  counter: 'next_id_counter',
  guard: 'next_id_guard',
  nextId: 'next_id',
  catchUp: 'next_id_catch_up',
  lastIssued: 'next_id_last_issued',
  clock: 'next_id_clock_ms',
  idToTimestamp: 'id_to_timestamp',
  idToShard: 'id_to_shard',
  timestampToMinId: 'timestamp_to_min_id',
} as const;

export interface GeneratorOptions {
  /** The shard's schema (a plain identifier). */
  schema: string;
  /** The logical shard number; must fit the layout's shard field. */
  shard: number;
  /** A preset name or a layout with `shard` and `sequence` fields (default `instagram`). */
  layout?: string | Layout | LayoutSpec;
  /** Custom epoch in ms since 1970 (default: the layout's). */
  epoch?: number;
  /** Test-only: read the clock through a replaceable function `next_id_clock_ms()`. */
  testClock?: boolean;
}

/** Everything the SQL needs, derived from the layout (no shift is written anywhere else). */
export interface GeneratorPlan {
  readonly schema: string;
  readonly shard: number;
  readonly layout: Layout;
  readonly testClock: boolean;
  readonly time: LayoutField;
  readonly shardField: LayoutField;
  readonly sequence: LayoutField;
  /** Constant bits of every id of this shard (the shard field in place). */
  readonly fixedBits: bigint;
  /** Largest counter value whose id still fits a signed bigint. */
  readonly maxCounter: bigint;
}

function layoutOf(options: GeneratorOptions): Layout {
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

/** Validates the options and derives the constants of the generator. */
export function generatorPlan(options: GeneratorOptions): GeneratorPlan {
  const schema = validateIdentifier(options.schema, 'schema');
  const layout = layoutOf(options);
  const shardField = layout.fields.find((f) => f.kind === 'shard');
  const sequence = layout.sequence;
  if (!shardField || !sequence) {
    throw new ShardflakeError(
      'INVALID_LAYOUT',
      `layout ${JSON.stringify(layout.name)} needs a shard field and a sequence field for an in-database generator`,
    );
  }
  const others = layout.fields.filter((f) => f !== layout.time && f !== shardField && f !== sequence);
  if (others.length > 0) {
    throw new ShardflakeError(
      'INVALID_LAYOUT',
      `layout ${JSON.stringify(layout.name)} has fields (${others.map((f) => f.name).join(', ')}) the in-database generator cannot fill; use time, shard and sequence only`,
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
    time: layout.time,
    shardField,
    sequence,
    fixedBits: BigInt(shard) << BigInt(shardField.shift),
    maxCounter: (layout.maxSignedTick << BigInt(sequence.bits)) | sequence.max,
  });
}

/** What the install records in the schema, so a re-install can tell "same generator" from "another shard". */
export function generatorSignature(plan: GeneratorPlan): string {
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

/** SQL expression: the counter value `c` (an SQL expression, evaluated once per use) → the id. */
function composeId(plan: GeneratorPlan, c: (use: number) => string): string {
  const seqBits = plan.sequence.bits;
  const timePart = `((${c(0)} >> ${seqBits}) << ${plan.time.shift})`;
  const seqPart =
    plan.sequence.shift === 0
      ? `(${c(1)} & ${plan.sequence.max})`
      : `((${c(1)} & ${plan.sequence.max}) << ${plan.sequence.shift})`;
  return `(${timePart} | ${plan.fixedBits}::bigint | ${seqPart})`;
}

/** SQL expression: the counter value that stands for the id expression `id` (its tick and sequence). */
function counterOfId(plan: GeneratorPlan, id: string): string {
  const seq =
    plan.sequence.shift === 0
      ? `(${id} & ${plan.sequence.max})`
      : `((${id} >> ${plan.sequence.shift}) & ${plan.sequence.max})`;
  return `(((${id} >> ${plan.time.shift}) << ${plan.sequence.bits}) | ${seq})`;
}

/** SQL expression: the current tick (whole time units since the layout's epoch), from the given ms expression. */
function tickExpr(plan: GeneratorPlan, ms: string): string {
  const sinceEpoch = `(${ms} - ${plan.layout.epoch}::float8)`;
  const units =
    plan.layout.timeUnitMs === 1 ? sinceEpoch : `(${sinceEpoch} / ${plan.layout.timeUnitMs}::float8)`;
  return `pg_catalog.floor(${units})::bigint`;
}

/** Milliseconds since 1970 as float8: `date_part` stays float8 on every version (extract is numeric since 14). */
const SYSTEM_CLOCK_MS = `(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8)`;

function clockMs(plan: GeneratorPlan): string {
  return plan.testClock ? `${qualified(plan.schema, GENERATOR_OBJECTS.clock)}()` : SYSTEM_CLOCK_MS;
}

/** Advisory-lock key of a schema's catch-up mutex: 'SF' in the high 32 bits, the counter's OID in the low. */
function catchUpLockKey(counter: string): string {
  return `((x'5346'::bigint << 32) | ${quoteLiteral(counter)}::regclass::oid::bigint)`;
}

/**
 * The SQL that installs (or upgrades in place) the generator and helpers into `options.schema`. Idempotent;
 * runs inside the caller's transaction (it contains no BEGIN/COMMIT) — wrap it in one when running it alone.
 */
export function generatorSql(options: GeneratorOptions): string {
  const plan = generatorPlan(options);
  const o = GENERATOR_OBJECTS;
  const s = quoteIdent(plan.schema, 'schema');
  const q = (name: string) => qualified(plan.schema, name);
  const counter = q(o.counter);
  const guard = q(o.guard);
  const counterLit = `${quoteLiteral(counter)}::regclass`;
  const guardLit = `${quoteLiteral(guard)}::regclass`;
  const seqBits = plan.sequence.bits;
  const { time, shardField, layout } = plan;
  const signature = generatorSignature(plan);
  const nowTick = tickExpr(plan, clockMs(plan));

  // A kept counter value, by use: the fast path reads it back with currval (session-local, no second fetch).
  const current = () => `pg_catalog.currval(${counterLit})`;
  const fastPath = `CASE
    WHEN pg_catalog.pg_sequence_last_value(${guardLit})
       = pg_catalog.pg_sequence_last_value(CASE WHEN pg_catalog.nextval(${counterLit}) >= 0 THEN ${guardLit} END)
    THEN CASE
      WHEN (${current()} >> ${seqBits}) >= ${nowTick} THEN ${composeId(plan, current)}
      ELSE ${q(o.catchUp)}()
    END
    ELSE ${q(o.catchUp)}()
  END`;

  const statements: string[] = [];
  // Serialises concurrent installs of any shard (CREATE … IF NOT EXISTS is not race-free); released at commit.
  statements.push(`SELECT pg_catalog.pg_advisory_xact_lock(x'5346'::int, 1)`);
  statements.push(`CREATE SCHEMA IF NOT EXISTS ${s}`);
  // Refuse to turn one shard's generator into another's, or to downgrade a newer install.
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
  IF (found - 'version') IS DISTINCT FROM (wanted - 'version') THEN
    RAISE EXCEPTION 'schema % already has a generator for shard % (layout %, epoch %), not shard % (layout %, epoch %)',
      ${quoteLiteral(plan.schema)}, found->>'shard', found->>'layout', found->>'epoch',
      wanted->>'shard', wanted->>'layout', wanted->>'epoch'
      USING ERRCODE = '${GENERATOR_MISMATCH_SQLSTATE}';
  END IF;
END
$shardflake$`);
  statements.push(
    `CREATE SEQUENCE IF NOT EXISTS ${counter} AS bigint MINVALUE 0 MAXVALUE ${plan.maxCounter} START 0 CACHE 1 NO CYCLE`,
  );
  // An upgrade keeps the counter's value; only its bounds are (re)asserted.
  statements.push(`ALTER SEQUENCE ${counter} MAXVALUE ${plan.maxCounter} CACHE 1 NO CYCLE`);
  statements.push(`CREATE SEQUENCE IF NOT EXISTS ${guard} AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE`);
  statements.push(`ALTER SEQUENCE ${guard} CACHE 1 NO CYCLE`);
  statements.push(
    `COMMENT ON SEQUENCE ${counter} IS ${quoteLiteral(
      `shardflake id counter: tick * 2^${seqBits} + sequence; the last value is the newest id handed out (gaps allowed)`,
    )}`,
  );
  statements.push(
    `COMMENT ON SEQUENCE ${guard} IS ${quoteLiteral(
      'shardflake generator guard (a seqlock): NULL last value = catch-up in progress',
    )}`,
  );
  if (plan.testClock) {
    // Test-only time source: tests replace this function to move time. Not part of the production SQL.
    statements.push(`CREATE OR REPLACE FUNCTION ${q(o.clock)}() RETURNS float8
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  RETURN ${SYSTEM_CLOCK_MS}`);
  }
  // above_id: also move past this id (ensureGeneratorAbove, after a shard moved from a server whose clock led).
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.catchUp)}(above_id bigint DEFAULT NULL) RETURNS bigint
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $shardflake$
-- The slow path of next_id(): see the correctness argument in shardflake's src/postgres/generator-sql.ts.
DECLARE
  lock_key constant bigint := ${catchUpLockKey(counter)};
  floor_counter bigint;
  guard_value bigint;
  c bigint;
BEGIN
  PERFORM pg_catalog.pg_advisory_lock(lock_key);
  BEGIN
    guard_value := pg_catalog.pg_sequence_last_value(${guardLit});
    IF guard_value IS NULL THEN
      -- A catch-up died between (1) and (4); we hold the mutex, so none is running: finish its (4).
      SELECT last_value INTO guard_value FROM ${guard};
      PERFORM pg_catalog.setval(${guardLit}, guard_value, true);
    END IF;
    floor_counter := ${nowTick} << ${seqBits};
    IF above_id IS NOT NULL THEN
      floor_counter := GREATEST(floor_counter, ${counterOfId(plan, 'above_id')} + 1);
    END IF;
    c := pg_catalog.nextval(${counterLit});
    IF c < floor_counter THEN
      PERFORM pg_catalog.setval(${guardLit}, guard_value + 1, false);   -- (1)
      c := pg_catalog.nextval(${counterLit});                           -- (2)
      IF c < floor_counter THEN
        PERFORM pg_catalog.setval(${counterLit}, floor_counter, true);  -- (3)
        c := floor_counter;
      END IF;
      PERFORM pg_catalog.setval(${guardLit}, guard_value + 1, true);    -- (4)
    END IF;
    PERFORM pg_catalog.pg_advisory_unlock(lock_key);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(lock_key);
    RAISE;
  END;
  RETURN ${composeId(plan, () => 'c')};
END
$shardflake$`);
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.nextId)}() RETURNS bigint
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  RETURN ${fastPath}`);
  statements.push(`COMMENT ON FUNCTION ${q(o.nextId)}() IS ${quoteLiteral(signature)}`);
  // ≥ every id handed out (values a fast path discarded count too), NULL before the first.
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.lastIssued)}() RETURNS bigint
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  BEGIN ATOMIC
    SELECT CASE WHEN is_called THEN ${composeId(plan, () => 'last_value')} END FROM ${counter};
  END`);

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

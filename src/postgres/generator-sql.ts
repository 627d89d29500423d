import { ShardflakeError } from '../errors.js';
import { type Layout, type LayoutField, type LayoutSpec, resolveLayout, withEpoch } from '../ids/layout.js';
import { qualified, quoteIdent, quoteLiteral, validateIdentifier } from './identifier.js';

/*
 * The id generator that runs inside PostgreSQL, one per logical shard (schema).
 *
 * STATE. One counter V held in the sequence `next_id_counter` (CACHE 1): V is the id without its shard bits —
 * the tick in the time field, the sequence in the sequence field, zeros elsewhere — and the sequence's
 * increment is one step of the sequence field. An id is `V | shard bits`, so ids are unique and ordered
 * exactly when counter values are. The sequence field never wraps: a full sequence carries upwards, so the
 * seed's collision (more than 2^seqBits ids in one millisecond repeat `nextval % 1024`) cannot happen. When
 * the layout has a field between the sequence and the time (instagram's shard), a carry lands in that gap; the
 * fast path rejects such a value and the catch-up moves the counter to the next tick. So when demand stays
 * above 2^seqBits ids per tick the time bits run ahead of the clock, and they fall back to the clock after.
 *
 * FAST PATH (inlined SQL). `nextval` is an atomic fetch-and-add that no transaction can roll back, so when the
 * fetched value is gap-free and at or ahead of the clock (tick(V) ≥ now) it is simply the next id. This is also
 * what happens after the server clock steps back: the counter is ahead, ids keep increasing from it.
 *
 * CATCH-UP (PL/pgSQL, rare: at most about once per tick). When the counter lags the clock it must jump to
 * now's tick. A sequence has no fetch-and-max, only `setval`, an absolute store. "Read V, compare, setval(T)"
 * races with concurrent `nextval` callers: session A reads v, session B's `nextval` hands out v+1 … v+k (k can
 * be anything — A may be descheduled), A stores T; if v+k ≥ T, the values T+1 … v+k are handed out a second
 * time (and T itself if v+k = T). Making catch-up callers take turns does not help: the values handed out twice
 * belong to fast-path callers that took no turn. So the fast path must cooperate, as cheaply as possible. Two
 * guards are built and measured (`bench sql`); both run the catch-up under a session-level advisory lock on the
 * schema's key (released before the function returns, and in its exception handler — never held until commit):
 *
 * GUARD `seqlock` (default; no lock in the fast path). A seqlock kept in a second sequence, `next_id_guard`, read
 * with `pg_sequence_last_value` (NULL while `is_called` is false, which here means "catch-up in progress"). The
 * catch-up, holding the key, does:
 *    (1) guard := in progress (g+1, is_called = false)      → guard reads NULL
 *    (2) v := nextval(counter)                               → every value fetched before (1) is < v
 *    (3) if v lags or is in the gap: setval(counter, T ≥ v)  → later nextvals return > T; the result is T
 *    (4) guard := g+1 (is_called = true)
 * The fast path evaluates, in this order, g1 := guard, v := nextval(counter), g2 := guard, and keeps v only if
 * g1 = g2 (both non-NULL) and v passes the clock/gap check; otherwise it discards v (a gap, never a duplicate)
 * and calls the catch-up. Proof that a kept v is never handed out again: the only store that moves the counter
 * is (3). If v's nextval came after some catch-up's (3), that store was below v. If it came before that
 * catch-up's (2), v < the (2) value ≤ T, and afterwards the counter hands out only values above T. Otherwise v's
 * nextval lies between (1) and (3) of that catch-up: then g1 was read before v's nextval and g2 after, so either
 * g1 was read after (1) and before (4) — NULL, rejected — or g1 was read before (1) and g2 after (1) — g2 is
 * NULL or a later guard value ≠ g1, rejected. (Each sequence operation is atomic under the sequence's buffer
 * lock, so all of them fall in one total order.) The catch-up's own result is its (2) value or the T it stored,
 * which no one else can keep: values before (2) are below it, values after (3) above it, values in between are
 * rejected. If a session dies inside a catch-up, the key goes with the session and the next catch-up (which
 * holds the key, so none is running) finishes the dead one's (4).
 *
 * GUARD `advisory`. The fast path takes the same key *shared* (try, never waits) around its nextval and releases
 * it in both branches before it builds the id; the catch-up holds it exclusively, so no nextval of a fast path
 * can fall between the catch-up's read and its store. Cheaper per id than two guard reads on some machines, but
 * a nextval that fails inside the shared section (a read-only transaction, a missing USAGE privilege) leaves
 * the shared lock held by that session until it ends, and every catch-up then waits for it. The seqlock has no
 * such failure mode, which is why it is the default.
 *
 * Increasing in call order (both guards): a call that starts after another returned fetches its counter value
 * later, and the counter only moves up (every store in (3) is above every value handed out before it).
 *
 * Evaluation order in the fast path is forced, not hoped for: g2's argument is a CASE over nextval's result
 * (data dependency), g1 is the left operand of the same `=` (PostgreSQL evaluates an operator's arguments left
 * to right), the id is built in the CASE branch chosen after both, and the advisory variant orders lock,
 * nextval and unlock through nested CASE conditions, which are evaluated in order.
 *
 * COST. `next_id()` is a SQL-language function whose body is one expression (`RETURN …`, parsed at creation so
 * the caller's search_path cannot change it), so the planner inlines it into the INSERT: no function call, no
 * PL/pgSQL. Per id it does one nextval, the guard (two sequence reads, or a shared lock and its release), one
 * currval (session-local) to build the id, a clock read and bit arithmetic. The check "gap-free and not behind
 * the clock" is one AND with a mask: x = (V >> seqTop) − (now << gapBits) is ≥ 0 with zero low gapBits exactly
 * when tick(V) ≥ now and the gap is empty, i.e. when x & (sign bit | gap mask) = 0.
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
  targetOf: 'next_id_target_of',
  lastIssued: 'next_id_last_issued',
  clock: 'next_id_clock_ms',
  testPause: 'next_id_test_pause',
  idToTimestamp: 'id_to_timestamp',
  idToShard: 'id_to_shard',
  timestampToMinId: 'timestamp_to_min_id',
} as const;

export interface GeneratorSqlOptions {
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
  /** How the fast path is kept safe from a concurrent catch-up (see the top of this file). */
  guard?: GuardKind;
}

/** `seqlock`: two guard reads per id, no lock. `advisory`: a shared advisory lock around the nextval. */
export const GUARD_KINDS = ['seqlock', 'advisory'] as const;
export type GuardKind = (typeof GUARD_KINDS)[number];

/** Everything the SQL needs, derived from the layout (no shift is written anywhere else). */
export interface GeneratorSqlPlan {
  readonly schema: string;
  readonly shard: number;
  readonly layout: Layout;
  readonly testClock: boolean;
  readonly guard: GuardKind;
  readonly time: LayoutField;
  readonly shardField: LayoutField;
  readonly sequence: LayoutField;
  /** Constant bits of every id of this shard (the shard field in place). */
  readonly fixedBits: bigint;
  /** The counter's step: one unit of the sequence field. */
  readonly increment: bigint;
  /** Lowest bit above the sequence field. */
  readonly seqTop: number;
  /** Width of the gap between the sequence field and the time field (instagram: the 13 shard bits). */
  readonly gapBits: number;
  /** Largest counter value whose id still fits a signed bigint. */
  readonly maxCounter: bigint;
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

function guardOf(guard: GuardKind | undefined): GuardKind {
  if (guard === undefined) return 'seqlock';
  if (!GUARD_KINDS.includes(guard)) {
    throw new ShardflakeError('INVALID_ARGUMENT', `guard must be one of ${GUARD_KINDS.join(', ')}`);
  }
  return guard;
}

/** Validates the options and derives the constants of the generator. */
export function generatorPlan(options: GeneratorSqlOptions): GeneratorSqlPlan {
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
    guard: guardOf(options.guard),
    time: layout.time,
    shardField,
    sequence,
    fixedBits: BigInt(shard) << BigInt(shardField.shift),
    increment: 1n << BigInt(sequence.shift),
    seqTop: sequence.shift + sequence.bits,
    gapBits: layout.time.shift - (sequence.shift + sequence.bits),
    maxCounter:
      (layout.maxSignedTick << BigInt(layout.time.shift)) | (sequence.max << BigInt(sequence.shift)),
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
    guard: plan.guard,
  });
}

/** SQL expression: the mask whose AND with x = (V >> seqTop) − (now << gapBits) is 0 iff V is keepable. */
function keepMask(plan: GeneratorSqlPlan): string {
  // The sign bit (V behind the clock) and the gap bits (a carry out of the sequence field).
  return BigInt.asIntN(64, (1n << 63n) | ((1n << BigInt(plan.gapBits)) - 1n)).toString();
}

/** SQL boolean: counter value `v` is gap-free and not behind the clock's tick `now`. */
function keepable(plan: GeneratorSqlPlan, v: string, now: string): string {
  return `(((${v} >> ${plan.seqTop}) - (${now} << ${plan.gapBits})) & (${keepMask(plan)})::bigint) = 0`;
}

/**
 * SQL expression: the first keepable counter value ≥ `v` — `v` itself unless its sequence carried into the gap,
 * in which case the first value of the next tick.
 */
function leaveGap(plan: GeneratorSqlPlan, v: string): string {
  if (plan.gapBits === 0) return v;
  const gapMask = (1n << BigInt(plan.gapBits)) - 1n;
  const shift = plan.time.shift;
  return `CASE WHEN ((${v} >> ${plan.seqTop}) & ${gapMask}) <> 0 THEN ((${v} >> ${shift}) + 1) << ${shift} ELSE ${v} END`;
}

/** SQL expression: the counter value that stands for the id expression `id` (its time and sequence fields). */
function counterOfId(plan: GeneratorSqlPlan, id: string): string {
  const { time, sequence } = plan;
  const bits = (time.max << BigInt(time.shift)) | (sequence.max << BigInt(sequence.shift));
  return `(${id} & (${BigInt.asIntN(64, bits)})::bigint)`;
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

/**
 * Advisory-lock key of a schema's generator: 'SF' in the high 32 bits, the counter's OID in the low. The catch-up
 * holds it exclusively; with `guard: 'advisory'` the fast path holds it shared around its nextval.
 */
function lockKey(counter: string): string {
  return `((x'5346'::bigint << 32) | ${quoteLiteral(counter)}::regclass::oid::bigint)`;
}

interface SqlNames {
  counterLit: string;
  guardLit: string;
  guard: string;
  catchUp: string;
  counter: string;
}

function namesOf(plan: GeneratorSqlPlan): SqlNames {
  const counter = qualified(plan.schema, GENERATOR_OBJECTS.counter);
  const guard = qualified(plan.schema, GENERATOR_OBJECTS.guard);
  return {
    counter,
    guard,
    counterLit: `${quoteLiteral(counter)}::regclass`,
    guardLit: `${quoteLiteral(guard)}::regclass`,
    catchUp: `${qualified(plan.schema, GENERATOR_OBJECTS.catchUp)}()`,
  };
}

/** g1 = g2 around the nextval, the keep check folded into g2's argument (a value not kept makes it NULL). */
function seqlockFastPath(plan: GeneratorSqlPlan): string {
  const n = namesOf(plan);
  const now = tickExpr(plan, clockMs(plan));
  return `CASE
    WHEN pg_catalog.pg_sequence_last_value(${n.guardLit})
       = pg_catalog.pg_sequence_last_value(
           CASE WHEN ${keepable(plan, `pg_catalog.nextval(${n.counterLit})`, now)} THEN ${n.guardLit} END)
    THEN pg_catalog.currval(${n.counterLit}) | ${plan.fixedBits}::bigint
    ELSE ${n.catchUp}
  END`;
}

/** The shared key around the nextval, released in both branches before the id is built. */
function advisoryFastPath(plan: GeneratorSqlPlan): string {
  const n = namesOf(plan);
  const key = lockKey(n.counter);
  const now = tickExpr(plan, clockMs(plan));
  return `CASE
    WHEN NOT pg_catalog.pg_try_advisory_lock_shared(${key}) THEN ${n.catchUp}
    WHEN CASE WHEN ${keepable(plan, `pg_catalog.nextval(${n.counterLit})`, now)}
              THEN pg_catalog.pg_advisory_unlock_shared(${key})
              ELSE NOT pg_catalog.pg_advisory_unlock_shared(${key}) END
    THEN pg_catalog.currval(${n.counterLit}) | ${plan.fixedBits}::bigint
    ELSE ${n.catchUp}
  END`;
}

/** Catch-up steps (1)–(4) under the key, for the seqlock guard. Sets `c`. */
function seqlockCatchUp(plan: GeneratorSqlPlan, nowTick: string): string {
  const n = namesOf(plan);
  return `    guard_value := pg_catalog.pg_sequence_last_value(${n.guardLit});
    IF guard_value IS NULL THEN
      -- A catch-up died between (1) and (4); we hold the key, so none is running: finish its (4).
      SELECT last_value INTO guard_value FROM ${n.guard};
      stored := pg_catalog.setval(${n.guardLit}, guard_value, true);
    END IF;
${floorLines(plan, nowTick)}
    c := pg_catalog.nextval(${n.counterLit});
    IF c < floor_counter OR c <> ${qualified(plan.schema, GENERATOR_OBJECTS.targetOf)}(c) THEN
      stored := pg_catalog.setval(${n.guardLit}, guard_value + 1, false);   -- (1)
      c := pg_catalog.nextval(${n.counterLit});                           -- (2)
${testPause(plan)}      target := GREATEST(${qualified(plan.schema, GENERATOR_OBJECTS.targetOf)}(c), floor_counter);
      IF target <> c THEN
        stored := pg_catalog.setval(${n.counterLit}, target, true);         -- (3)
        c := target;
      END IF;
      stored := pg_catalog.setval(${n.guardLit}, guard_value + 1, true);    -- (4)
    END IF;`;
}

/** With the advisory guard, holding the key exclusively already keeps every fast path out. Sets `c`. */
function advisoryCatchUp(plan: GeneratorSqlPlan, nowTick: string): string {
  const n = namesOf(plan);
  return `${floorLines(plan, nowTick)}
    c := pg_catalog.nextval(${n.counterLit});
${testPause(plan)}    target := GREATEST(${qualified(plan.schema, GENERATOR_OBJECTS.targetOf)}(c), floor_counter);
    IF target <> c THEN
      stored := pg_catalog.setval(${n.counterLit}, target, true);
      c := target;
    END IF;`;
}

/** Test-only: a replaceable pause inside the catch-up's window, so that tests can hold the window open. */
function testPause(plan: GeneratorSqlPlan): string {
  return plan.testClock ? `    PERFORM ${qualified(plan.schema, GENERATOR_OBJECTS.testPause)}();\n` : '';
}

function floorLines(plan: GeneratorSqlPlan, nowTick: string): string {
  return `    floor_counter := ${nowTick} << ${plan.time.shift};
    IF above_id IS NOT NULL THEN
      floor_counter := GREATEST(floor_counter, ${qualified(plan.schema, GENERATOR_OBJECTS.targetOf)}(${counterOfId(plan, 'above_id')} + ${plan.increment}));
    END IF;`;
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
  const guard = q(o.guard);
  const { time, shardField, layout } = plan;
  const signature = generatorSignature(plan);
  const nowTick = tickExpr(plan, clockMs(plan));

  const fastPath = plan.guard === 'seqlock' ? seqlockFastPath(plan) : advisoryFastPath(plan);
  const statements: string[] = [];
  // Serialises concurrent installs into the same schema (CREATE … IF NOT EXISTS is not race-free); released at
  // commit. Keyed by the schema name, so a cluster creating many shards in parallel is not serialised by it.
  statements.push(
    `SELECT pg_catalog.pg_advisory_xact_lock(x'5346'::int, pg_catalog.hashtext(${quoteLiteral(plan.schema)}))`,
  );
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
    `CREATE SEQUENCE IF NOT EXISTS ${counter} AS bigint INCREMENT ${plan.increment} MINVALUE 0 MAXVALUE ${plan.maxCounter} START 0 CACHE 1 NO CYCLE`,
  );
  statements.push(`CREATE SEQUENCE IF NOT EXISTS ${guard} AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE`);
  statements.push(
    `COMMENT ON SEQUENCE ${counter} IS ${quoteLiteral(
      'shardflake id counter: the newest id handed out, without its shard bits (values in the gap are skipped)',
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
    statements.push(`CREATE OR REPLACE FUNCTION ${q(o.testPause)}() RETURNS void
  LANGUAGE sql VOLATILE PARALLEL UNSAFE
  BEGIN ATOMIC END`);
  }
  // The first keepable counter value ≥ v (v itself unless its sequence carried into the gap).
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.targetOf)}(v bigint) RETURNS bigint
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN ${leaveGap(plan, 'v')}`);
  // above_id: also move past this id (ensureGeneratorAbove, after a shard moved from a server whose clock led).
  statements.push(`CREATE OR REPLACE FUNCTION ${q(o.catchUp)}(above_id bigint DEFAULT NULL) RETURNS bigint
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $shardflake$
-- The slow path of next_id(): see the correctness argument in shardflake's src/postgres/generator-sql.ts.
DECLARE
  lock_key constant bigint := ${lockKey(counter)};
  floor_counter bigint;
  guard_value bigint;
  target bigint;
  c bigint;
  -- Results assigned instead of PERFORMed: PL/pgSQL evaluates an assignment as a simple expression, several times
  -- cheaper than PERFORM's full statement, and the catch-up runs up to once per tick.
  stored bigint;
  locked text;
  released boolean;
BEGIN
  locked := pg_catalog.pg_advisory_lock(lock_key)::text;
  BEGIN
${plan.guard === 'seqlock' ? seqlockCatchUp(plan, nowTick) : advisoryCatchUp(plan, nowTick)}
    released := pg_catalog.pg_advisory_unlock(lock_key);
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    PERFORM pg_catalog.pg_advisory_unlock(lock_key);
    RAISE;
  END;
  RETURN c | ${plan.fixedBits}::bigint;
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
    SELECT CASE WHEN is_called THEN ${q(o.targetOf)}(last_value) | ${plan.fixedBits}::bigint END FROM ${counter};
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

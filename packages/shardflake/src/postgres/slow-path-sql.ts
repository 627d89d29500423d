import { quoteLiteral } from './identifier.js';
import { TRUSTED_OWNER } from './trusted-owner.js';

/*
 * The generator's slow path (see the correctness argument at the top of generator-sql.ts), written once per
 * database instead of once per shard (version 6).
 *
 * WHY SHARED. The slow path runs about once per tick per shard, so with keys spread over thousands of shards nearly
 * every insert takes it, and a backend that writes N shards compiled N copies of it: per shard one PL/pgSQL
 * function (≈20 kB) and its four cached plans (≈18 kB each), about 90 kB of the ≈155 kB a backend grew per shard
 * written (issue 33 item 2; docs/benchmarks.md, "Connections warm on a slice of shards"). One PL/pgSQL function
 * per database, taking the shard's constants as arguments, is compiled and planned once per backend.
 *
 * RIGHTS. The shared functions run with their CALLER's rights: nextval needs USAGE on the counter they are given,
 * setval UPDATE, so calling them directly lets a role move only a counter it could setval itself. Each shard keeps
 * its `next_id_new_era()`, now one call with no slow path of its own to compile: SECURITY DEFINER (so
 * that an inserting role needs no UPDATE on the counter), no arguments (so that it can move only its own
 * counter, with its own constants, to max(now, era + 1)), search_path pinned to pg_catalog, pg_temp (so that no
 * one's operators stand in for the built-in ones in the shared body, which is planned under that path). The
 * schema must be the installing role's (TRUSTED_OWNER): its owner could replace the body that every shard's
 * owner then runs; where it is another's, the install uses a schema of the installing role's own (below).
 */

/**
 * The schema that holds the slow path shared by every shard of a database — when it is the installing role's (or a
 * role it belongs to; for a superuser, a superuser's). Else the install uses `shardflake_generator_<role oid>`,
 * its own (say, a superuser running a move onto a server where a non-superuser ran `cluster init`): a role never
 * makes its shards run code that another role could replace.
 */
export const SLOW_PATH_SCHEMA = 'shardflake_generator';

/** Stands for the chosen schema (quoted as needed) in the SQL below; replaced at install time. */
export const SLOW_PATH_PLACEHOLDER = '@slow_path@';

/** The shared functions (in SLOW_PATH_SCHEMA); the `_test` ones exist only where a test-clock install ran. */
export const SLOW_PATH_FUNCTIONS = {
  newEra: 'new_era',
  catchUp: 'catch_up',
  newEraTest: 'new_era_test',
  catchUpTest: 'catch_up_test',
  testClock: 'test_clock_ms',
  testPause: 'test_pause',
} as const;

/** Milliseconds since 1970 as float8: `date_part` stays float8 on every version (extract is numeric since 14). */
export const SYSTEM_CLOCK_MS = `(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000::float8)`;

/**
 * SQL boolean: counter value `v` (an expression evaluated once) is keepable at tick `now`: its shard field is
 * `bits` and its era is not behind `now`. `mask` is the shard field's bits and the sign bit: (v − now's first id)
 * is negative exactly when v's era is behind. Each argument is SQL (a literal or a parameter's name).
 */
export function keepCheck(v: string, now: string, shift: string, mask: string, bits: string): string {
  return `((${v} - (${now} << ${shift})) & ${mask}) = ${bits}`;
}

/** SQL expression: whole time units of `unitMs` since `epochMs`, from the ms expression `ms` (all SQL). */
export function tickOf(ms: string, epochMs: string, unitMs: string | null): string {
  const sinceEpoch = `(${ms} - ${epochMs})`;
  return `pg_catalog.floor(${unitMs === null ? sinceEpoch : `(${sinceEpoch} / ${unitMs})`})::bigint`;
}

/** The shared slow path's parameters, in order: what generator-sql.ts folded into each shard's copy up to v5. */
const PARAMETERS = [
  'counter regclass', // the shard's next_id_counter
  'lock_key bigint', // lockKey(counter), computed by the caller: derived here, it cost 4 functions per call
  'shift integer', // T, the time field's shift
  'era_unit bigint', // 2^T: multiplied, not shifted, so that a tick the layout cannot hold overflows (22003)
  'keep_mask bigint', // the shard field's bits and the sign bit (keepCheck)
  'shard_bits bigint', // the shard field in place: constant bits of every id of this shard
  'epoch_ms float8', // the layout's epoch, ms since 1970
  'unit_ms float8', // one tick, in ms
  'layout text', // the layout's name, for the exhausted-layout message
];
/** `next_id_catch_up(above_id)`'s two more: the time field's largest value, and the id to move past. */
const ABOVE_PARAMETERS = ['time_max bigint', 'above_id bigint'];

/** The name of a shared slow path (in the chosen schema). */
function slowPathName(withAbove: boolean, testClock: boolean): string {
  const f = SLOW_PATH_FUNCTIONS;
  return withAbove ? (testClock ? f.catchUpTest : f.catchUp) : testClock ? f.newEraTest : f.newEra;
}

/**
 * The advisory-lock key of a counter (a regclass expression): 'SF' in the high 32 bits, the counter's OID in the
 * low. Each shard's function passes it with the counter (a constant the planner folds); a direct caller that
 * passed another key could break only a counter it may setval anyway.
 */
function lockKey(counter: string): string {
  return `((x'5346'::bigint << 32) | ${counter}::pg_catalog.oid::bigint)`;
}

/** The schema of counter `counter` (a regclass expression), for messages. */
const schemaOf = (counter: string) =>
  `(SELECT n.nspname FROM pg_catalog.pg_class k JOIN pg_catalog.pg_namespace n ON n.oid = k.relnamespace
     WHERE k.oid = ${counter}::pg_catalog.oid)`;

/**
 * The body of a shared slow path, in two entry points made from one template:
 * - without `above_id`: what every shard's `next_id_new_era()` calls (above);
 * - with `above_id`: what `next_id_catch_up(above_id)` calls for `ensureGeneratorAbove` (shard moves): also moves
 *   past `above_id`; it runs with the caller's rights (the per-shard function is not SECURITY DEFINER), so only a
 *   role that may setval the counter can call it usefully.
 * A test-clock variant reads the clock through the shard's `next_id_clock_ms()` and calls its
 * `next_id_test_pause()` inside the window (through two dispatchers, below); the production body contains no
 * such indirection. (Exported for the test that holds the two to that difference.)
 */
export function slowPathBody(withAbove: boolean, testClock: boolean): string {
  const key = 'lock_key';
  const clock = testClock
    ? `${SLOW_PATH_PLACEHOLDER}.${SLOW_PATH_FUNCTIONS.testClock}(counter)`
    : SYSTEM_CLOCK_MS;
  const pause = testClock
    ? `    PERFORM ${SLOW_PATH_PLACEHOLDER}.${SLOW_PATH_FUNCTIONS.testPause}(counter);\n`
    : '';
  const aboveKeep = withAbove ? ' AND (above_id IS NULL OR above_id < c)' : '';
  const aboveEra = withAbove ? ', COALESCE(((above_id >> shift) & time_max) + 1, 0)' : '';
  // Few functions on purpose: PL/pgSQL sets up every function and operator of its expressions again in each
  // transaction (a catalog lookup and a privilege check each), and this runs in the first insert of every tick, so
  // their count is its cost (docs/next-id.md, "Cost"). Hence: the clock read once; the keep check and the store in
  // one expression; the era multiplied into place rather than shifted, so that a tick the layout cannot hold
  // overflows (SQLSTATE 22003) inside the store instead of needing a statement of its own to check it; results
  // assigned, not PERFORMed (PERFORM runs a full query).
  return `
-- The slow path of every shard's next_id(): see the correctness argument in shardflake's src/postgres/generator-sql.ts.
DECLARE
  c bigint;
  tick bigint;
  id bigint;
BEGIN
  -- The lock is taken and released inside the block: PL/pgSQL checks for a cancel before every statement, and one
  -- that came between a lock taken outside the block and the block's start (or between the unlock and the RETURN)
  -- would keep this session's lock until it disconnects, stalling every other session's slow path on this shard.
  BEGIN
    -- nextval under the lock: a CASE evaluates its condition first.
    c := CASE WHEN pg_catalog.pg_advisory_lock(${key}) IS NOT NULL THEN pg_catalog.nextval(counter) END;
    tick := ${tickOf(clock, 'epoch_ms', 'unit_ms')};
${pause}    -- Keep c if it is keepable (another slow path already started a new era), as the fast path would; else
    -- store a new era: after the clock, and after the era read under the key (so every store is above every fetch).
    id := CASE
      WHEN ${keepCheck('c', 'tick', 'shift', 'keep_mask', 'shard_bits')}${aboveKeep} THEN c
      ELSE pg_catalog.setval(counter, GREATEST(tick, (c >> shift) + 1${aboveEra}) * era_unit + shard_bits, true)
    END;
    -- Unlock and return in one statement, so that no cancel check falls between them.
    RETURN CASE WHEN pg_catalog.pg_advisory_unlock(${key}) THEN id END;
  EXCEPTION WHEN OTHERS OR query_canceled THEN
    -- Release the lock only if this call got it: the error may have come while waiting for it.
    IF EXISTS (SELECT FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted
               AND pid = pg_catalog.pg_backend_pid() AND objsubid = 1 AND classid = ${0x5346}
               AND objid = (lock_key & 4294967295)::pg_catalog.oid) THEN
      PERFORM pg_catalog.pg_advisory_unlock(${key});
    END IF;
    IF SQLSTATE = '22003' THEN
      RAISE EXCEPTION 'shardflake generator in schema % is exhausted: tick % does not fit layout %',
        ${schemaOf('counter')}, GREATEST(tick, (c >> shift) + 1), layout
        USING ERRCODE = '22003';
    END IF;
    RAISE;
  END;
END
`;
}

/** A test-clock dispatcher: calls the counter's schema's `<name>()` (dynamic SQL: tests only). */
function dispatcherBody(name: string, returns: 'float8' | 'void'): string {
  const call = `pg_catalog.format('SELECT %I.${name}()', ${schemaOf('counter')})`;
  return returns === 'void'
    ? `
BEGIN
  EXECUTE ${call};
END
`
    : `
DECLARE
  result float8;
BEGIN
  EXECUTE ${call} INTO result;
  RETURN result;
END
`;
}

interface SharedFunction {
  name: string;
  signature: string;
  returns: string;
  body: string;
}

function sharedFunctions(testClock: boolean): SharedFunction[] {
  const slowPath = (withAbove: boolean, test: boolean): SharedFunction => ({
    name: slowPathName(withAbove, test),
    signature: [...PARAMETERS, ...(withAbove ? ABOVE_PARAMETERS : [])].join(', '),
    returns: 'bigint',
    body: slowPathBody(withAbove, test),
  });
  const functions = [slowPath(false, false), slowPath(true, false)];
  if (testClock) {
    functions.push(
      slowPath(false, true),
      slowPath(true, true),
      {
        name: SLOW_PATH_FUNCTIONS.testClock,
        signature: 'counter regclass',
        returns: 'float8',
        body: dispatcherBody('next_id_clock_ms', 'float8'),
      },
      {
        name: SLOW_PATH_FUNCTIONS.testPause,
        signature: 'counter regclass',
        returns: 'void',
        body: dispatcherBody('next_id_test_pause', 'void'),
      },
    );
  }
  return functions;
}

function createFunctionSql(f: SharedFunction): string {
  return `CREATE OR REPLACE FUNCTION ${SLOW_PATH_PLACEHOLDER}.${f.name}(${f.signature}) RETURNS ${f.returns}
  LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $shardflake$${f.body}$shardflake$`;
}

/** A shard's entry point into the shared slow path, written both ways (see `slowPathInstallSql`). */
export interface SlowPathEntry {
  /** `CREATE OR REPLACE FUNCTION` as a one-statement SQL function (PostgreSQL 18 and later). */
  sql: string;
  /** The same as a PL/pgSQL function of one RETURN (PostgreSQL 17 and earlier). */
  plpgsql: string;
}

/**
 * One statement that installs the shared slow path (and, for a test-clock install, its test variant) and then the
 * shard's entry points into it (`entries`, which name the shared functions through SLOW_PATH_PLACEHOLDER).
 *
 * The shared functions are written only when missing or different, as this version writes them: a CREATE OR
 * REPLACE of a function every backend has compiled makes each of them compile it again, and `cluster init` runs
 * this once per shard. The first install takes an advisory lock (released at commit) so that parallel installs do
 * not race on CREATE SCHEMA.
 *
 * The entry points are SQL functions from PostgreSQL 18 on, which keeps a plan of an SQL function's statement for
 * the session: a backend keeps ≈ 19 kB per shard for it, against ≈ 27 kB for a PL/pgSQL function and its
 * expression's plan. Before 18, an SQL function is planned again in every transaction that calls it (callgrind on
 * 15: 257,000 instructions per slow path instead of 62,500), so there they are PL/pgSQL.
 */
export function slowPathInstallSql(testClock: boolean, entries: SlowPathEntry[]): string {
  const functions = sharedFunctions(testClock);
  const here = (sql: string) =>
    `pg_catalog.replace(${quoteLiteral(sql)}, ${quoteLiteral(SLOW_PATH_PLACEHOLDER)}, pg_catalog.quote_ident(slow_path))`;
  const wanted = functions
    .map((f) => `(${quoteLiteral(f.name)}, ${here(f.body)})`)
    .join(',\n                     ');
  const untrusted = `EXISTS (SELECT FROM pg_catalog.pg_namespace n WHERE n.nspname = slow_path AND NOT ${TRUSTED_OWNER})`;
  return `DO $install$
DECLARE
  slow_path text := ${quoteLiteral(SLOW_PATH_SCHEMA)};
BEGIN
  -- Another role's schema (see SLOW_PATH_SCHEMA in shardflake's src/postgres/slow-path-sql.ts): this role's own.
  IF ${untrusted} THEN
    slow_path := slow_path || '_' || (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user);
  END IF;
  -- Unless everything is there as this version writes it, in a trusted schema:
  IF (SELECT count(*) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = slow_path AND ${TRUSTED_OWNER}
        AND (p.proname::text, p.prosrc) IN (${wanted})) < ${functions.length} THEN
    PERFORM pg_catalog.pg_advisory_xact_lock(x'5346'::int, pg_catalog.hashtext(slow_path));
    IF ${untrusted} THEN
      RAISE EXCEPTION 'schema % belongs to another role; shardflake will not install the generator''s shared slow path there', slow_path
        USING ERRCODE = '42501';
    END IF;
    EXECUTE 'CREATE SCHEMA IF NOT EXISTS ' || pg_catalog.quote_ident(slow_path);
    -- Every shard's owner calls these (their next_id_new_era() runs as that owner), and they run with the caller's
    -- rights, so anyone may: a caller can move only a counter it could setval itself.
    EXECUTE 'GRANT USAGE ON SCHEMA ' || pg_catalog.quote_ident(slow_path) || ' TO PUBLIC';
${functions.map((f) => `    EXECUTE ${here(createFunctionSql(f))};`).join('\n')}
  END IF;
  IF pg_catalog.current_setting('server_version_num')::int >= 180000 THEN
${entries.map((e) => `    EXECUTE ${here(e.sql)};`).join('\n')}
  ELSE
${entries.map((e) => `    EXECUTE ${here(e.plpgsql)};`).join('\n')}
  END IF;
END
$install$`;
}

/**
 * SQL: a call of the shared slow path with the shard's constants (each SQL), for the body of that shard's
 * `next_id_new_era()` (no `above`) or `next_id_catch_up(above_id)` (`above` names the parameter).
 */
export function slowPathCall(
  testClock: boolean,
  constants: {
    counter: string;
    shift: number;
    eraUnit: string;
    keepMask: string;
    shardBits: string;
    epochMs: number;
    unitMs: number;
    layout: string;
  },
  above?: { timeMax: string; aboveId: string },
): string {
  const c = constants;
  const args = [
    `${c.counter}::regclass`,
    lockKey(`${c.counter}::regclass`),
    `${c.shift}`,
    c.eraUnit,
    c.keepMask,
    c.shardBits,
    `${c.epochMs}::float8`,
    `${c.unitMs}::float8`,
    quoteLiteral(c.layout),
    ...(above ? [above.timeMax, above.aboveId] : []),
  ];
  return `${SLOW_PATH_PLACEHOLDER}.${slowPathName(above !== undefined, testClock)}(${args.join(', ')})`;
}

/**
 * SQL that drops the shared slow path's schemas this role trusts when no `next_id_new_era()` is left in the
 * database to call them: for code that removes a whole cluster (adopt's abort of a cluster it created), after the
 * shard schemas. Any `next_id_new_era()` left — another cluster's, a generator installed on its own — keeps them:
 * before PostgreSQL 18 its PL/pgSQL call records no dependency that a DROP … RESTRICT would see.
 */
export function dropSlowPathIfUnusedSql(): string {
  return `DO $drop$
DECLARE
  s text;
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_proc WHERE proname = 'next_id_new_era') THEN
    RETURN;
  END IF;
  FOR s IN SELECT n.nspname FROM pg_catalog.pg_namespace n
            WHERE n.nspname ~ ${quoteLiteral(`^${SLOW_PATH_SCHEMA}(_[0-9]+)?$`)} AND ${TRUSTED_OWNER} LOOP
    EXECUTE 'DROP SCHEMA ' || pg_catalog.quote_ident(s) || ' CASCADE';
  END LOOP;
END
$drop$`;
}

import type { Migration, TableTemplate } from '../config/config.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { quoteIdent, quoteLiteral } from '../postgres/identifier.js';

/**
 * The SQL shardflake installs for reference tables, from this one place. Every server holds one copy of every
 * reference table in the schema `shardflake_reference` (a schema of its own: it never collides with a shard schema,
 * whose names are `<prefix>NNNN`, nor with the catalog's `shardflake`). Shard sessions put it on their search_path
 * after the shard's schema (routing/statements.ts), so `SELECT … FROM photos JOIN plans …` finds `plans` there.
 *
 * Bookkeeping, in the same schema (names starting with `_shardflake`, which config.ts refuses for user tables):
 * - `_shardflake_state`: one row — the version of this SQL, and whether the copy is `synced` (holds every row the
 *   other copies hold). A copy made together with every other copy of a new cluster starts synced (all are empty);
 *   a copy made later on one server (a server added to the config) starts unsynced and is filled from a synced
 *   copy before any shard moves there (copy.ts).
 * - `_shardflake_tables`: the config's reference tables created here (a table dropped by a migration is not
 *   created again).
 * - `_shardflake_migrations`: the reference migrations applied here, one row per version.
 * - `_shardflake_writers`: the transactions allowed to write reference tables (see the guard below). A writer's mark
 *   (begin_write) takes ROW EXCLUSIVE on it before the writer touches any reference table; a copy being filled takes
 *   SHARE on it first (copy.ts). It is the one lock that orders writers and fills (write.ts says why neither waits
 *   for the other in a cycle).
 * - `_shardflake_state.copies`: the servers this server knows to hold a synced copy. begin_write returns it, read
 *   under the writer's lock: how a writer that started from an older list learns of a new copy (write.ts).
 * - `_shardflake_digests`: per table, its row count and digest — the sum of a 64-bit hash of each row's jsonb —
 *   so a writer compares the contents of every table it wrote, on every server, at commit, in one small read
 *   (write.ts, "Drift"). Statement-level triggers with transition tables (`_shardflake_digest_*`, AFTER INSERT,
 *   UPDATE, DELETE, TRUNCATE) sum each statement's change per table into a transaction-local setting; the first
 *   one also queues a single deferred constraint trigger (`_shardflake_apply`, on `_shardflake_pending`) that adds
 *   the sums to the digest rows when the transaction commits or prepares — whoever wrote, a superuser writing
 *   around the guard included — or earlier, when withReference asks for its digests (`_shardflake_written_digests`,
 *   which makes it IMMEDIATE). Digest rows are locked only from then to the transaction's end, in table-name
 *   order, so writers of one table are serialised only for their commit, and two writers never deadlock over
 *   digests. A row's jsonb is taken with the settings that shape a value's text pinned (TimeZone, DateStyle,
 *   IntervalStyle, extra_float_digits, bytea_output, lc_monetary), so servers with other defaults hash equal rows
 *   alike. A change no trigger sees (a migration's new column default, a TRUNCATE alone) is covered by recomputing
 *   every digest from the rows in each `cluster migrate` and fill.
 *
 * The write guard (why copies cannot drift). A statement-level BEFORE INSERT/UPDATE/DELETE/TRUNCATE trigger on every
 * table of the schema raises SQLSTATE SF020 unless the current transaction's id is in `_shardflake_writers`. Only
 * `_shardflake_begin_write()` puts it there, and `router.withReference`, `cluster migrate` and the copy before a move
 * are the only callers. What a plain role cannot do:
 * - write the writers table (REVOKE ALL FROM PUBLIC; the guard and begin_write are SECURITY DEFINER, run as the
 *   installing role with a pinned search_path);
 * - call begin_write (EXECUTE revoked from PUBLIC: a role writes reference tables only when granted it);
 * - forge the mark with a setting (a custom GUC could be set by anyone, which is why the mark is a row keyed by
 *   the transaction id, which a role cannot choose), or skip the trigger (DISABLE TRIGGER needs the table's
 *   owner, `session_replication_role` needs a superuser).
 * A role that holds EXECUTE (usually the router's own role, the owner) could still call begin_write by name inside a
 * shard session: the guard stops mistakes — an ORM's insert, a stray UPDATE in a shard session — not a deliberate
 * call of an internal function. Rows of finished transactions are removed by later begin_write calls (SKIP LOCKED,
 * so two writers never wait on each other's cleanup); transaction ids (xid8) never repeat, so a leftover row never
 * opens a later transaction.
 */
/** Version of the SQL below; a server whose `_shardflake_state.sql_version` is lower gets it installed again. */
export const REFERENCE_SQL_VERSION = 2;
/** Raised by the guard on a write outside a reference write. */
export const REFERENCE_WRITE_SQLSTATE = 'SF020';

const S = quoteIdent(REFERENCE_SCHEMA, 'schema');
export const STATE_TABLE = `${S}._shardflake_state`;
export const TABLES_TABLE = `${S}._shardflake_tables`;
export const MIGRATIONS_TABLE = `${S}._shardflake_migrations`;
export const WRITERS_TABLE = `${S}._shardflake_writers`;
export const DIGESTS_TABLE = `${S}._shardflake_digests`;
export const BEGIN_WRITE = `${S}._shardflake_begin_write()`;
const GUARD = `${S}._shardflake_guard`;
const GUARD_ALL = `${S}._shardflake_guard_all()`;
/** Recomputes every table's digest from its rows (after a migration, a fill, an upgrade). */
export const DIGEST_ALL = `${S}._shardflake_digest_all()`;
const DIGEST_OF = `${S}._shardflake_digest_of`;
const DIGEST_NOTE = `${S}._shardflake_digest_note`;
/** The transaction-local setting that lists the tables a transaction wrote (the digest triggers set it). */
export const WRITTEN_SETTING = 'shardflake.reference_written';
/** The transaction-local setting that sums a transaction's changes per table until they are applied. */
const DELTA_SETTING = 'shardflake.reference_delta';
const PENDING_TABLE = `${S}._shardflake_pending`;

/** The settings that shape a value's text, pinned wherever a row's jsonb is hashed (see the comment above). */
const PINNED = `SET search_path = pg_catalog, pg_temp SET timezone = 'UTC' SET datestyle = 'ISO, YMD'
  SET intervalstyle = 'postgres' SET extra_float_digits = 1 SET bytea_output = 'hex' SET lc_monetary = 'C'`;
/** A row's hash; a table's digest is their sum (numeric: no overflow, and the order of rows does not matter). */
const ROW_HASH = 'hashtextextended(to_jsonb(r)::text, 0)';
/**
 * The user tables of the reference schema (not the bookkeeping), for a plpgsql loop; in name order, the order
 * every writer locks digest rows in (a recompute and a writer never wait for each other in a cycle).
 */
const USER_TABLES = `SELECT c.relname FROM pg_class c WHERE c.relnamespace = '${REFERENCE_SCHEMA}'::regnamespace
             AND c.relkind IN ('r', 'p') AND c.relname NOT LIKE '\\_shardflake%' ORDER BY c.relname`;

/**
 * begin_write (version 2): the mark, taken under the writers table's lock, then this copy's state read by a later
 * statement — so with a new snapshot (READ COMMITTED), which sees every fill that held the lock before this writer.
 */
const BEGIN_WRITE_SQL = `CREATE OR REPLACE FUNCTION ${BEGIN_WRITE} RETURNS jsonb
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $begin$
BEGIN
  DELETE FROM ${WRITERS_TABLE} WHERE xid IN (
    SELECT xid FROM ${WRITERS_TABLE} WHERE xid < pg_snapshot_xmin(pg_current_snapshot()) FOR UPDATE SKIP LOCKED);
  INSERT INTO ${WRITERS_TABLE} VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
  RETURN (SELECT jsonb_build_object('copies', to_jsonb(copies), 'synced', synced) FROM ${STATE_TABLE});
END
$begin$`;

/** The schema, bookkeeping and guard: idempotent, run in one transaction (the state row is written by the caller). */
export function referenceSchemaSql(): string {
  return `SET LOCAL client_min_messages TO warning;
CREATE SCHEMA IF NOT EXISTS ${S};
COMMENT ON SCHEMA ${S} IS 'shardflake reference tables: one copy per server, written only through router.withReference';
CREATE TABLE IF NOT EXISTS ${STATE_TABLE} (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  sql_version integer NOT NULL,
  synced boolean NOT NULL,
  synced_from text,
  changed_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE ${STATE_TABLE} ADD COLUMN IF NOT EXISTS copies text[] NOT NULL DEFAULT '{}';
CREATE TABLE IF NOT EXISTS ${TABLES_TABLE} (name text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (
  version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ${WRITERS_TABLE} (xid xid8 PRIMARY KEY);
REVOKE ALL ON ${WRITERS_TABLE} FROM PUBLIC;
CREATE TABLE IF NOT EXISTS ${DIGESTS_TABLE} (name text PRIMARY KEY, rows bigint NOT NULL, digest numeric NOT NULL);
REVOKE ALL ON ${DIGESTS_TABLE} FROM PUBLIC;
GRANT SELECT ON ${DIGESTS_TABLE} TO PUBLIC;
-- Version 1's begin_write returned void, which CREATE OR REPLACE cannot change: replaced, keeping who may call it.
DO $up$
DECLARE
  grantees text[];
  g text;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('${BEGIN_WRITE}') AND prorettype = 'void'::regtype) THEN
    SELECT array_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END) INTO grantees
      FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
     WHERE p.oid = to_regprocedure('${BEGIN_WRITE}') AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner;
    DROP FUNCTION ${BEGIN_WRITE};
    EXECUTE ${quoteLiteral(BEGIN_WRITE_SQL)};
    REVOKE ALL ON FUNCTION ${BEGIN_WRITE} FROM PUBLIC;
    FOREACH g IN ARRAY coalesce(grantees, '{}') LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION ${BEGIN_WRITE} TO %s', g);
    END LOOP;
  END IF;
END
$up$;
${BEGIN_WRITE_SQL};
REVOKE ALL ON FUNCTION ${BEGIN_WRITE} FROM PUBLIC;
CREATE OR REPLACE FUNCTION ${GUARD}() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $guard$
BEGIN
  IF pg_current_xact_id_if_assigned() IS NULL OR NOT EXISTS (
       SELECT 1 FROM ${WRITERS_TABLE} WHERE xid = pg_current_xact_id_if_assigned()) THEN
    RAISE EXCEPTION USING ERRCODE = '${REFERENCE_WRITE_SQLSTATE}',
      MESSAGE = format('reference table %s is read-only here: write it with router.withReference, which changes the copy on every server together', TG_TABLE_NAME);
  END IF;
  RETURN NULL;
END
$guard$;
CREATE OR REPLACE FUNCTION ${DIGEST_OF}(t regclass, OUT rows bigint, OUT digest numeric)
  LANGUAGE plpgsql ${PINNED} AS $of$
BEGIN
  EXECUTE format('SELECT count(*), coalesce(sum(${ROW_HASH}), 0) FROM %s r', t) INTO rows, digest;
END
$of$;
REVOKE ALL ON FUNCTION ${DIGEST_OF}(regclass) FROM PUBLIC;
CREATE TABLE IF NOT EXISTS ${PENDING_TABLE} (xid xid8 PRIMARY KEY);
REVOKE ALL ON ${PENDING_TABLE} FROM PUBLIC;
CREATE OR REPLACE FUNCTION ${DIGEST_NOTE}(t text, n bigint, d numeric, reset boolean) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $note$
DECLARE
  acc jsonb := coalesce(nullif(current_setting('${DELTA_SETTING}', true), ''), '{}')::jsonb;
  cur jsonb := acc -> t;
  written text := coalesce(current_setting('${WRITTEN_SETTING}', true), '');
BEGIN
  IF acc = '{}' THEN
    -- The transaction's first change since its digests were applied: one deferred event applies them at commit.
    INSERT INTO ${PENDING_TABLE} VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
  END IF;
  acc := jsonb_set(acc, ARRAY[t], jsonb_build_object(
    'reset', reset OR coalesce((cur ->> 'reset')::boolean, false),
    'rows', CASE WHEN reset THEN 0 ELSE coalesce((cur ->> 'rows')::bigint, 0) + n END,
    'digest', CASE WHEN reset THEN 0 ELSE coalesce((cur ->> 'digest')::numeric, 0) + d END));
  PERFORM set_config('${DELTA_SETTING}', acc::text, true);
  IF NOT t = ANY(string_to_array(written, ',')) THEN
    PERFORM set_config('${WRITTEN_SETTING}', concat_ws(',', nullif(written, ''), t), true);
  END IF;
END
$note$;
REVOKE ALL ON FUNCTION ${DIGEST_NOTE}(text, bigint, numeric, boolean) FROM PUBLIC;
CREATE OR REPLACE FUNCTION ${S}._shardflake_digest_apply() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $apply$
DECLARE
  acc jsonb := coalesce(nullif(current_setting('${DELTA_SETTING}', true), ''), '{}')::jsonb;
  t text;
  cur jsonb;
BEGIN
  -- In name order: two transactions applying digests of the same tables lock their rows in one order.
  FOR t IN SELECT k FROM jsonb_object_keys(acc) k ORDER BY k COLLATE "C" LOOP
    cur := acc -> t;
    UPDATE ${DIGESTS_TABLE}
       SET rows = CASE WHEN (cur ->> 'reset')::boolean THEN 0 ELSE rows END + (cur ->> 'rows')::bigint,
           digest = CASE WHEN (cur ->> 'reset')::boolean THEN 0 ELSE digest END + (cur ->> 'digest')::numeric
     WHERE name = t;
    IF NOT FOUND AND to_regclass(format('%I.%I', '${REFERENCE_SCHEMA}', t)) IS NOT NULL THEN
      -- No digest yet (a table made outside cluster migrate, or renamed): from its rows, which hold this change.
      INSERT INTO ${DIGESTS_TABLE} (name, rows, digest)
        SELECT t, x.rows, x.digest FROM ${DIGEST_OF}(format('%I.%I', '${REFERENCE_SCHEMA}', t)::regclass) x
        ON CONFLICT (name) DO UPDATE SET rows = excluded.rows, digest = excluded.digest;
    END IF;
  END LOOP;
  PERFORM set_config('${DELTA_SETTING}', '', true);
  DELETE FROM ${PENDING_TABLE} WHERE xid = pg_current_xact_id();
  RETURN NULL;
END
$apply$;
DO $apply_trigger$
BEGIN
  -- A constraint trigger has no CREATE OR REPLACE.
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '${PENDING_TABLE}'::regclass AND tgname = '_shardflake_apply') THEN
    CREATE CONSTRAINT TRIGGER _shardflake_apply AFTER INSERT ON ${PENDING_TABLE}
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${S}._shardflake_digest_apply();
  END IF;
END
$apply_trigger$;
CREATE OR REPLACE FUNCTION ${S}._shardflake_written_digests() RETURNS TABLE (name text, rows text, digest text)
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $written$
BEGIN
  -- The deferred apply, now: this transaction's digest rows are locked from here to its end.
  SET CONSTRAINTS ${S}._shardflake_apply IMMEDIATE;
  RETURN QUERY SELECT d.name, d.rows::text, d.digest::text FROM ${DIGESTS_TABLE} d
    WHERE d.name = ANY(string_to_array(coalesce(current_setting('${WRITTEN_SETTING}', true), ''), ','))
    ORDER BY d.name;
END
$written$;
CREATE OR REPLACE FUNCTION ${S}._shardflake_digest_insert() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER ${PINNED} AS $ins$
DECLARE n bigint; d numeric;
BEGIN
  SELECT count(*), coalesce(sum(${ROW_HASH}), 0) INTO n, d FROM new_rows r;
  PERFORM ${DIGEST_NOTE}(TG_TABLE_NAME, n, d, false);
  RETURN NULL;
END
$ins$;
CREATE OR REPLACE FUNCTION ${S}._shardflake_digest_update() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER ${PINNED} AS $upd$
DECLARE n bigint; d numeric; n_old bigint; d_old numeric;
BEGIN
  SELECT count(*), coalesce(sum(${ROW_HASH}), 0) INTO n, d FROM new_rows r;
  SELECT count(*), coalesce(sum(${ROW_HASH}), 0) INTO n_old, d_old FROM old_rows r;
  PERFORM ${DIGEST_NOTE}(TG_TABLE_NAME, n - n_old, d - d_old, false);
  RETURN NULL;
END
$upd$;
CREATE OR REPLACE FUNCTION ${S}._shardflake_digest_delete() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER ${PINNED} AS $del$
DECLARE n bigint; d numeric;
BEGIN
  SELECT count(*), coalesce(sum(${ROW_HASH}), 0) INTO n, d FROM old_rows r;
  PERFORM ${DIGEST_NOTE}(TG_TABLE_NAME, -n, -d, false);
  RETURN NULL;
END
$del$;
CREATE OR REPLACE FUNCTION ${S}._shardflake_digest_truncate() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $tru$
BEGIN
  PERFORM ${DIGEST_NOTE}(TG_TABLE_NAME, 0, 0, true);
  RETURN NULL;
END
$tru$;
CREATE OR REPLACE FUNCTION ${GUARD_ALL} RETURNS void
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $all$
DECLARE t name;
BEGIN
  FOR t IN ${USER_TABLES}
  LOOP
    EXECUTE format('CREATE OR REPLACE TRIGGER _shardflake_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %I.%I FOR EACH STATEMENT EXECUTE FUNCTION ${GUARD}()', '${REFERENCE_SCHEMA}', t);
    -- Transition tables allow one event per trigger: a digest trigger per event.
    EXECUTE format('CREATE OR REPLACE TRIGGER _shardflake_digest_i AFTER INSERT ON %I.%I REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ${S}._shardflake_digest_insert()', '${REFERENCE_SCHEMA}', t);
    EXECUTE format('CREATE OR REPLACE TRIGGER _shardflake_digest_u AFTER UPDATE ON %I.%I REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ${S}._shardflake_digest_update()', '${REFERENCE_SCHEMA}', t);
    EXECUTE format('CREATE OR REPLACE TRIGGER _shardflake_digest_d AFTER DELETE ON %I.%I REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ${S}._shardflake_digest_delete()', '${REFERENCE_SCHEMA}', t);
    EXECUTE format('CREATE OR REPLACE TRIGGER _shardflake_digest_t AFTER TRUNCATE ON %I.%I FOR EACH STATEMENT EXECUTE FUNCTION ${S}._shardflake_digest_truncate()', '${REFERENCE_SCHEMA}', t);
  END LOOP;
END
$all$;
REVOKE ALL ON FUNCTION ${GUARD_ALL} FROM PUBLIC;
CREATE OR REPLACE FUNCTION ${DIGEST_ALL} RETURNS void
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $dall$
DECLARE t name;
BEGIN
  DELETE FROM ${DIGESTS_TABLE} d WHERE NOT EXISTS (SELECT 1 FROM pg_class c
    WHERE c.relnamespace = '${REFERENCE_SCHEMA}'::regnamespace AND c.relkind IN ('r', 'p') AND c.relname = d.name);
  -- Recomputed from the rows, which hold this transaction's changes: none is left to apply at commit.
  PERFORM set_config('${DELTA_SETTING}', '', true);
  FOR t IN ${USER_TABLES}
  LOOP
    INSERT INTO ${DIGESTS_TABLE} (name, rows, digest)
      SELECT t, x.rows, x.digest FROM ${DIGEST_OF}(format('%I.%I', '${REFERENCE_SCHEMA}', t)::regclass) x
      ON CONFLICT (name) DO UPDATE SET rows = excluded.rows, digest = excluded.digest;
  END LOOP;
END
$dall$;
REVOKE ALL ON FUNCTION ${DIGEST_ALL} FROM PUBLIC`;
}

/** The digests of the tables this transaction wrote, its own changes applied (sql above), by table name. */
export const WRITTEN_DIGESTS_SQL = `SELECT name, rows, digest FROM ${S}._shardflake_written_digests()`;

/** Every table's stored digest next to the one its rows give now (verify.ts: a write the triggers did not see). */
export const DIGESTS_AGAINST_ROWS_SQL = `SELECT c.relname::text AS name, d.rows::text AS stored_rows,
    d.digest::text AS stored, x.rows::text AS rows, x.digest::text AS digest
  FROM pg_class c
  CROSS JOIN LATERAL ${DIGEST_OF}(c.oid::regclass) x
  LEFT JOIN ${DIGESTS_TABLE} d ON d.name = c.relname
  WHERE c.relnamespace = to_regnamespace('${REFERENCE_SCHEMA}') AND c.relkind IN ('r', 'p')
    AND c.relname NOT LIKE '\\_shardflake%' ORDER BY 1`;

/**
 * Brings an older copy's bookkeeping up to this SQL without touching its tables' shapes or rows (after
 * `referenceSchemaSql`): every table gets the guard and the digest triggers, and its digest from its rows.
 */
export function referenceUpgradeSql(): string {
  return [`SELECT ${GUARD_ALL}`, `SELECT ${DIGEST_ALL}`].join(';\n');
}

/** Lists the reference tables of a server (user tables only), in name order. */
export const LIST_REFERENCE_TABLES_SQL = `SELECT c.relname::text AS name FROM pg_class c
  WHERE c.relnamespace = to_regnamespace('${REFERENCE_SCHEMA}') AND c.relkind IN ('r', 'p')
    AND c.relname NOT LIKE '\\_shardflake%' ORDER BY 1`;

/** Whether the server has the reference bookkeeping (a statement naming a missing table fails as it is parsed). */
export const HAS_STATE_SQL = `SELECT to_regclass('${REFERENCE_SCHEMA}._shardflake_state') IS NOT NULL AS ok`;

/** This server's state, as one JSON value (see state.ts). */
export const READ_STATE_SQL = `SELECT json_build_object('sqlVersion', sql_version, 'synced', synced,
    'copies', coalesce(to_jsonb(st) -> 'copies', '[]'),
    'tables', (SELECT coalesce(json_agg(name ORDER BY name), '[]') FROM ${TABLES_TABLE}),
    'version', (SELECT coalesce(max(version), 0) FROM ${MIGRATIONS_TABLE})) AS state
  FROM ${STATE_TABLE} st`;

/** Runs `statements` with the reference schema as the whole search_path (inside a transaction). */
function inReference(statements: readonly string[]): string[] {
  return [`SET LOCAL search_path TO ${S}`, ...statements];
}

/**
 * Brings one server's copy to the config: creates the config's tables it has never had, applies the migrations
 * after `fromVersion`, records both, and puts the guard on every table. For one transaction, after
 * `referenceSchemaSql`; begin_write first, so data migrations (INSERT/UPDATE/DELETE) pass the guard.
 */
export function referenceChangeSql(
  tables: readonly TableTemplate[],
  migrations: readonly Migration[],
  created: ReadonlySet<string>,
  fromVersion: number,
): string {
  const newTables = tables.filter((t) => !created.has(t.name));
  const pending = migrations.filter((m) => m.version > fromVersion);
  return [
    `SELECT ${BEGIN_WRITE}`,
    ...inReference([
      ...newTables.flatMap((t) => [
        ...t.statements,
        `INSERT INTO ${TABLES_TABLE} (name) VALUES (${quoteLiteral(t.name)})`,
      ]),
      ...pending.flatMap((m) => [
        ...m.statements,
        `INSERT INTO ${MIGRATIONS_TABLE} (version, name) VALUES (${m.version}, ${quoteLiteral(m.name)})`,
      ]),
    ]),
    `SELECT ${GUARD_ALL}`,
  ].join(';\n');
}

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
 * - `_shardflake_writers`: the transactions allowed to write reference tables (see the guard below).
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
export const REFERENCE_SQL_VERSION = 1;
/** Raised by the guard on a write outside a reference write. */
export const REFERENCE_WRITE_SQLSTATE = 'SF020';

const S = quoteIdent(REFERENCE_SCHEMA, 'schema');
export const STATE_TABLE = `${S}._shardflake_state`;
export const TABLES_TABLE = `${S}._shardflake_tables`;
export const MIGRATIONS_TABLE = `${S}._shardflake_migrations`;
const WRITERS_TABLE = `${S}._shardflake_writers`;
export const BEGIN_WRITE = `${S}._shardflake_begin_write()`;
const GUARD = `${S}._shardflake_guard`;
const GUARD_ALL = `${S}._shardflake_guard_all()`;

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
CREATE TABLE IF NOT EXISTS ${TABLES_TABLE} (name text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (
  version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ${WRITERS_TABLE} (xid xid8 PRIMARY KEY);
REVOKE ALL ON ${WRITERS_TABLE} FROM PUBLIC;
CREATE OR REPLACE FUNCTION ${BEGIN_WRITE} RETURNS void
  LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $begin$
  DELETE FROM ${WRITERS_TABLE} WHERE xid IN (
    SELECT xid FROM ${WRITERS_TABLE} WHERE xid < pg_snapshot_xmin(pg_current_snapshot()) FOR UPDATE SKIP LOCKED);
  INSERT INTO ${WRITERS_TABLE} VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
$begin$;
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
CREATE OR REPLACE FUNCTION ${GUARD_ALL} RETURNS void
  LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $all$
DECLARE t name;
BEGIN
  FOR t IN SELECT c.relname FROM pg_class c WHERE c.relnamespace = '${REFERENCE_SCHEMA}'::regnamespace
             AND c.relkind IN ('r', 'p') AND c.relname NOT LIKE '\\_shardflake%'
  LOOP
    EXECUTE format('CREATE OR REPLACE TRIGGER _shardflake_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %I.%I FOR EACH STATEMENT EXECUTE FUNCTION ${GUARD}()', '${REFERENCE_SCHEMA}', t);
  END LOOP;
END
$all$;
REVOKE ALL ON FUNCTION ${GUARD_ALL} FROM PUBLIC`;
}

/** Lists the reference tables of a server (user tables only), in name order. */
export const LIST_REFERENCE_TABLES_SQL = `SELECT c.relname::text AS name FROM pg_class c
  WHERE c.relnamespace = to_regnamespace('${REFERENCE_SCHEMA}') AND c.relkind IN ('r', 'p')
    AND c.relname NOT LIKE '\\_shardflake%' ORDER BY 1`;

/** Whether the server has the reference bookkeeping (a statement naming a missing table fails as it is parsed). */
export const HAS_STATE_SQL = `SELECT to_regclass('${REFERENCE_SCHEMA}._shardflake_state') IS NOT NULL AS ok`;

/** This server's state, as one JSON value (see state.ts). */
export const READ_STATE_SQL = `SELECT json_build_object('sqlVersion', sql_version, 'synced', synced,
    'tables', (SELECT coalesce(json_agg(name ORDER BY name), '[]') FROM ${TABLES_TABLE}),
    'version', (SELECT coalesce(max(version), 0) FROM ${MIGRATIONS_TABLE})) AS state
  FROM ${STATE_TABLE}`;

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

import type { LookupDefinition } from '../config/lookups.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';

/**
 * What a lookup installs inside every shard schema (generated here only; every statement is idempotent, so it runs
 * at shard creation, again when `cluster migrate` builds a new lookup, and again on a rerun):
 *
 * - `_shardflake_lookup_<name> (value text, id bigint)`: the entries whose value hashes to this shard. Primary
 *   key `(value)` for a unique lookup — the index whose second insert of a key waits for the first inserter's
 *   transaction, which is what uniqueness rests on (maintain.ts) — and `(value, id)` otherwise.
 * - `_shardflake_lookup_changes`: the rows of this transaction whose looked-up value changed, written by the
 *   capture triggers and emptied by the session before it commits. It is empty in every committed state.
 * - `_shardflake_capture_<name>()`: an AFTER INSERT / UPDATE OF column, id / DELETE row trigger on the table
 *   that writes the old value (-1) and the new value (+1) into the change table, plus a notice (sent once per
 *   transaction) that tells the session it has changes to apply; a BEFORE TRUNCATE trigger that refuses unless
 *   the table is empty.
 * - `_shardflake_lookup_unapplied()`: a deferred constraint trigger on the change table. At COMMIT (or PREPARE)
 *   a change row still present means the transaction did not go through a shardflake session (psql, a plain
 *   pool, a router without lookups): it fails with SF010 instead of committing a row the lookup would not know.
 * - `_shardflake_owner_<name>`, unique lookups only: an index on the table by the value's text form
 *   (`(column::text)`, which PostgreSQL stores as a plain index on a text column). The router's owner cache reads
 *   a cached owner by its value through it (owner-cache.ts); a column whose text form is not immutable
 *   (timestamptz, date, interval: it depends on settings) cannot have it, and a unique lookup on one is refused.
 *   With it, `_shardflake_none_prepared()`: true when no transaction is prepared on the server (and false on a
 *   standby, which cannot tell), the owner cache's check (a PL/pgSQL function, so that a statement that calls it
 *   is planned as fast as one that does not; its body runs only for a row version whose xmax is set).
 *
 * Values are kept as text (`column::text`), so equality is the text form's; a lookup with `normalize: "lower"`
 * keeps `lower(column::text COLLATE "C")` instead (lookupValueSql), which lowers ASCII letters only and so gives
 * exactly what lookupText gives in JavaScript (a lowering that depends on a collation could put a value's entry in
 * another shard than a read looks in).
 */
export const CHANGES_TABLE = '_shardflake_lookup_changes';

/** True when a recorded lookup is the one a config defines (a changed lookup needs a new name). */
export function sameDefinition(recorded: LookupDefinition, lookup: LookupDefinition): boolean {
  return (
    recorded.table === lookup.table &&
    recorded.column === lookup.column &&
    recorded.unique === lookup.unique &&
    recorded.normalize === lookup.normalize
  );
}

/** A recorded lookup in words: `users.email (unique, lower)`. */
export function describeLookup(lookup: LookupDefinition): string {
  const traits = [lookup.unique ? 'unique' : '', lookup.normalize === 'lower' ? 'lower' : ''].filter(Boolean);
  return `${lookup.table}.${lookup.column}${traits.length > 0 ? ` (${traits.join(', ')})` : ''}`;
}

/** The text a lookup keeps for a column value, as SQL over `expr` (a quoted column or `NEW.col`). */
export function lookupValueSql(lookup: Pick<LookupDefinition, 'normalize'>, expr: string): string {
  return lookup.normalize === 'lower' ? `lower(${expr}::text COLLATE "C")` : `${expr}::text`;
}

/** The same in JavaScript, for a value's text (`valueText`): what reads look for and hash. */
export function lookupText(lookup: Pick<LookupDefinition, 'normalize'>, text: string): string {
  return lookup.normalize === 'lower' ? text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase()) : text;
}
export const UNAPPLIED_FUNCTION = '_shardflake_lookup_unapplied';
/** SQLSTATE of a commit that would leave lookup changes unapplied (or a TRUNCATE of a table with a lookup). */
export const UNAPPLIED_SQLSTATE = 'SF010';
/** The notice a capture trigger sends (once per transaction) to the session. */
export const PENDING_NOTICE = 'shardflake: lookup changes pending';
/**
 * The transaction-local setting that keeps the notice to once per transaction (a writer that applies its changes
 * in the same batch sets it first and gets no notice: insert-beside.ts).
 */
export const PENDING_SETTING = 'shardflake.lookup_pending';

/**
 * Set (transaction-local) by an insert that writes its row's entries itself, in the same statement
 * (insert-beside.ts, "direct"): the capture trigger then lets that transaction's INSERTs through without change
 * rows. Only the router's direct insert sets it; a client that sets it by hand takes the entries on itself, as one
 * that sets session_replication_role = replica does (verify finds what it left out).
 */
export const DIRECT_SETTING = 'shardflake.lookup_direct';

export function entryTable(name: string): string {
  return `_shardflake_lookup_${name}`;
}

export function captureFunction(name: string): string {
  return `_shardflake_capture_${name}`;
}

/** The owner cache's check that no transaction is prepared on the server (see above). */
export const NONE_PREPARED_FUNCTION = '_shardflake_none_prepared';

/** The owner index of a unique lookup (≤ 58 characters: lookup names stop at 40). */
export function ownerIndex(name: string): string {
  return `_shardflake_owner_${name}`;
}

/**
 * The value's text form as the entries hold it, of the lookup's column, normalized as the lookup says (the owner
 * index's expression: the cache's read must use the very same one to use the index).
 */
export function valueTextSql(lookup: Pick<LookupDefinition, 'column' | 'normalize'>, alias?: string): string {
  const column = quoteIdent(lookup.column, 'column');
  return lookupValueSql(lookup, `${alias ? `${alias}.` : ''}${column}`);
}

/**
 * The owner index of a unique lookup in one shard (none for a lookup that is not unique: the cache is for unique
 * lookups only). PostgreSQL's own error for a text form that is not immutable names no lookup; this one does.
 */
export function ownerIndexSql(schema: string, lookup: LookupDefinition): string[] {
  if (!lookup.unique) return [];
  const message = `unique lookup ${lookup.name} needs an index on ${lookup.table}.${lookup.column}::text, and the text form of that column's type depends on settings (timestamptz, date, interval…): look the value up in a text or numeric column instead`;
  return [
    `DO $sf$ BEGIN
  CREATE INDEX IF NOT EXISTS ${quoteIdent(ownerIndex(lookup.name))} ON ${qualified(schema, lookup.table)} ((${valueTextSql(lookup)}));
EXCEPTION WHEN invalid_object_definition THEN
  RAISE EXCEPTION USING ERRCODE = 'invalid_object_definition', MESSAGE = ${quoteLiteral(message)};
END $sf$`,
    `CREATE OR REPLACE FUNCTION ${qualified(schema, NONE_PREPARED_FUNCTION)}() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $sf$
BEGIN
  -- A standby lists no prepared transaction (pg_prepared_xact() is empty there while the primary's are replayed
  -- as in progress): it answers false, and a version with xmax set is never taken from a replica.
  RETURN NOT pg_catalog.pg_is_in_recovery() AND NOT EXISTS (SELECT FROM pg_catalog.pg_prepared_xact());
END
$sf$`,
  ];
}

/** The change table and its safety net: the same for every lookup of a shard. */
function changesSql(schema: string): string[] {
  const changes = qualified(schema, CHANGES_TABLE);
  const unapplied = qualified(schema, UNAPPLIED_FUNCTION);
  return [
    `CREATE TABLE IF NOT EXISTS ${changes} (
  seq bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  lookup text NOT NULL,
  value text NOT NULL,
  id bigint NOT NULL,
  delta smallint NOT NULL CHECK (delta IN (-1, 1)),
  is_unique boolean NOT NULL)`,
    `CREATE OR REPLACE FUNCTION ${unapplied}() RETURNS trigger LANGUAGE plpgsql AS $sf$
BEGIN
  IF EXISTS (SELECT 1 FROM ${changes} WHERE seq = NEW.seq) THEN
    RAISE EXCEPTION USING ERRCODE = '${UNAPPLIED_SQLSTATE}',
      MESSAGE = 'a write to a table with a shardflake lookup was not applied to the lookup: write it through a shard session of a shardflake router';
  END IF;
  RETURN NULL;
END
$sf$`,
    `DROP TRIGGER IF EXISTS ${quoteIdent(UNAPPLIED_FUNCTION)} ON ${changes}`,
    `CREATE CONSTRAINT TRIGGER ${quoteIdent(UNAPPLIED_FUNCTION)} AFTER INSERT ON ${changes}
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${unapplied}()`,
  ];
}

/** The entry table of one lookup in one shard (no trigger: a build creates every shard's table first). */
export function entryTableSql(schema: string, lookup: LookupDefinition): string[] {
  const key = lookup.unique ? '(value)' : '(value, id)';
  return [
    `CREATE TABLE IF NOT EXISTS ${qualified(schema, entryTable(lookup.name))} (value text NOT NULL, id bigint NOT NULL, PRIMARY KEY ${key})`,
  ];
}

/** The capture triggers of one lookup on its table in one shard: its function, then the triggers. */
export function captureSql(schema: string, lookup: LookupDefinition): string[] {
  const table = qualified(schema, lookup.table);
  const column = quoteIdent(lookup.column, 'column');
  const fn = qualified(schema, captureFunction(lookup.name));
  const trigger = quoteIdent(captureFunction(lookup.name));
  const truncate = quoteIdent(`${captureFunction(lookup.name)}_t`);
  return [
    captureFunctionSql(schema, lookup),
    `DROP TRIGGER IF EXISTS ${trigger} ON ${table}`,
    `CREATE TRIGGER ${trigger} AFTER INSERT OR UPDATE OF ${column}, id OR DELETE ON ${table} FOR EACH ROW EXECUTE FUNCTION ${fn}()`,
    `DROP TRIGGER IF EXISTS ${truncate} ON ${table}`,
    `CREATE TRIGGER ${truncate} BEFORE TRUNCATE ON ${table} FOR EACH STATEMENT EXECUTE FUNCTION ${fn}()`,
  ];
}

/**
 * The capture function alone (CREATE OR REPLACE keeps its OID, so the triggers stay as they are): what `cluster
 * migrate` runs in every shard to bring a lookup built by an older version up to this one (`direct_insert`).
 */
export function captureFunctionSql(schema: string, lookup: LookupDefinition): string {
  const changes = qualified(schema, CHANGES_TABLE);
  const fn = qualified(schema, captureFunction(lookup.name));
  const table = qualified(schema, lookup.table);
  const column = quoteIdent(lookup.column, 'column');
  const name = quoteLiteral(lookup.name);
  const unique = lookup.unique ? 'true' : 'false';
  // Branches by TG_OP before touching OLD or NEW: in an INSERT trigger OLD is unassigned, in a DELETE one NEW.
  return `CREATE OR REPLACE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $sf$
DECLARE
  moved boolean := false;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    -- An empty table may be truncated (a move prepares its target copy so); rows would leave entries behind.
    IF EXISTS (SELECT 1 FROM ${table}) THEN
      RAISE EXCEPTION USING ERRCODE = '${UNAPPLIED_SQLSTATE}',
        MESSAGE = 'TRUNCATE of a table with a shardflake lookup would leave its entries behind: DELETE the rows instead';
    END IF;
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' AND current_setting('${DIRECT_SETTING}', true) = 'on' THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    moved := (${lookupValueSql(lookup, `NEW.${column}`)}, NEW.id) IS DISTINCT FROM (${lookupValueSql(lookup, `OLD.${column}`)}, OLD.id);
  END IF;
  IF TG_OP = 'DELETE' OR moved THEN
    IF OLD.${column} IS NOT NULL THEN
      INSERT INTO ${changes} (lookup, value, id, delta, is_unique) VALUES (${name}, ${lookupValueSql(lookup, `OLD.${column}`)}, OLD.id, -1, ${unique});
    END IF;
  END IF;
  IF TG_OP = 'INSERT' OR moved THEN
    IF NEW.${column} IS NOT NULL THEN
      INSERT INTO ${changes} (lookup, value, id, delta, is_unique) VALUES (${name}, ${lookupValueSql(lookup, `NEW.${column}`)}, NEW.id, 1, ${unique});
    END IF;
  END IF;
  IF current_setting('${PENDING_SETTING}', true) IS DISTINCT FROM 'on' THEN
    PERFORM set_config('${PENDING_SETTING}', 'on', true);
    -- The notice is how the session learns it has work before COMMIT; a client that silenced notices would miss
    -- it (and then fail at COMMIT with SF010, safely), so they are let through for the rest of the transaction.
    IF current_setting('client_min_messages') IN ('warning', 'error') THEN
      PERFORM set_config('client_min_messages', 'notice', true);
    END IF;
    RAISE NOTICE '${PENDING_NOTICE}';
  END IF;
  RETURN NULL;
END
$sf$`;
}

/** Everything the config's lookups need in a new shard (inside its creation transaction). */
export function shardLookupsSql(schema: string, lookups: readonly LookupDefinition[]): string[] {
  if (lookups.length === 0) return [];
  return [
    ...changesSql(schema),
    ...lookups.flatMap((l) => entryTableSql(schema, l)),
    ...lookups.flatMap((l) => captureSql(schema, l)),
    ...lookups.flatMap((l) => ownerIndexSql(schema, l)),
  ];
}

/** A built lookup's tables in an existing shard, before any capture trigger exists anywhere. */
export function shardEntryTablesSql(schema: string, lookup: LookupDefinition): string[] {
  return [...changesSql(schema), ...entryTableSql(schema, lookup)];
}

import { TRUSTED_OWNER } from '../postgres/trusted-owner.js';
import { FENCE_FUNCTION, FENCED_ROLE } from './names.js';

/**
 * The guard of sealed old copies against a superuser's tools. A seal (fence.ts) takes the old copy away from
 * every login role, but a superuser may still, without meaning to, undo it: `pg_restore --disable-triggers` runs
 * `ALTER TABLE … DISABLE TRIGGER ALL`, a cleanup script drops "stray" triggers, an admin gives a table back to the
 * application's role. Two event triggers, `ENABLE ALWAYS` (so replica mode does not skip them either), refuse
 * (ddl_command_end) any DDL that leaves a sealed schema (one owned by `shardflake_fenced`) with a table whose
 * fence trigger is missing or not `ENABLE ALWAYS`, a relation or fence function owned by someone else, or that
 * touched one of its routines at all; any DDL on a routine that a sealed table's trigger or column default runs,
 * wherever it now lives (`ALTER FUNCTION … SET SCHEMA` reports the schema the routine went to, not the sealed one
 * it left); and (sql_drop) any drop of an object inside a sealed schema that does not drop the schema itself
 * (`cluster cleanup` drops whole schemas). Routines other than the fence function may keep their former owner
 * (new seals, fence.ts) or be `shardflake_fenced`'s (seals made before): both pass, and in both nobody changes
 * them. The switch of the move's DDL guard (`shardflake.move_ddl`, only for the role that installed it)
 * lets shardflake's own statements through. A superuser who drops these event triggers first can still lift a
 * seal: that takes intent, and nothing inside PostgreSQL can stop it.
 *
 * Cost: each DDL statement on the server joins its commands' schemas with pg_namespace (an index lookup); the
 * triggers exist only while a sealed copy does (`dropFenceGuardIfUnusedSql`, run by cleanup), so `cluster init`
 * of thousands of shards between moves pays nothing.
 */
export const FENCE_GUARD_TRIGGERS = ['shardflake_fence_guard_end', 'shardflake_fence_guard_drop'] as const;
/** The DDL guard's switch (move/ddl-guard.ts DDL_BYPASS_SETTING; the name is part of installed SQL). */
const BYPASS_SETTING = 'shardflake.move_ddl';
const GUARD_SCHEMA = 'shardflake_move';

/**
 * A pg_depend row `d` of an object that lives in the schema whose oid is the PL/pgSQL variable `ns`: every table,
 * view, sequence and routine records that dependency when it is made, and pg_depend's index on the referenced
 * object finds them without scanning pg_class or pg_proc (which hold every shard's objects). For the guard here and
 * the seal (fence.ts).
 */
export const OF_SCHEMA = `d.refclassid = 'pg_catalog.pg_namespace'::regclass AND d.refobjid = ns AND d.objsubid = 0`;

/** Idempotent statements that install the guard; refused when `shardflake_move` is another role's. */
export function fenceGuardSql(): string {
  const refuse = `RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('schema %s is the sealed old copy of a moved shard: its fence, owners and objects stay as they are until shardflake cluster cleanup drops it', hit)`;
  return `DO $owned$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspname = '${GUARD_SCHEMA}' AND NOT ${TRUSTED_OWNER}) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = 'schema ${GUARD_SCHEMA} belongs to another role; shardflake will not install its guard there';
  END IF;
END
$owned$;
CREATE SCHEMA IF NOT EXISTS ${GUARD_SCHEMA};
CREATE OR REPLACE FUNCTION ${GUARD_SCHEMA}.keep_seals() RETURNS event_trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $keep$
DECLARE
  fenced oid := (SELECT oid FROM pg_roles WHERE rolname = '${FENCED_ROLE}');
  hit text;
  ns oid;
  fn oid;
BEGIN
  IF fenced IS NULL THEN
    RETURN;
  END IF;
  IF coalesce(current_setting('${BYPASS_SETTING}', true), '') = 'on'
     AND pg_has_role(current_user, (SELECT nspowner FROM pg_namespace WHERE nspname = '${GUARD_SCHEMA}'), 'USAGE') THEN
    RETURN;
  END IF;
  IF TG_EVENT = 'sql_drop' THEN
    -- A sealed schema still there after the drop lost something of its own.
    SELECT n.nspname INTO hit
      FROM pg_event_trigger_dropped_objects() d JOIN pg_namespace n ON n.nspname = d.schema_name
     WHERE n.nspowner = fenced LIMIT 1;
  ELSE
    -- The sealed schemas the command touched (usually none: return at once), then each checked through its
    -- objects' dependency on it (pg_depend's index), not by scanning pg_class and pg_proc. This trigger runs after
    -- every DDL command on the server — every migration of every shard, each statement of a seal — and one query
    -- that scanned those catalogs for every command cost 85–110 ms at 512 shards on a server (28 of them per
    -- seal), growing with the shards.
    FOR ns IN SELECT DISTINCT n.oid FROM pg_event_trigger_ddl_commands() c
                JOIN pg_namespace n ON n.nspname = c.schema_name WHERE n.nspowner = fenced LOOP
      IF EXISTS (SELECT 1 FROM pg_depend d JOIN pg_class t ON t.oid = d.objid
                  WHERE ${OF_SCHEMA}
                    AND d.classid = 'pg_catalog.pg_class'::regclass
                    AND ((t.relkind IN ('r', 'p')
                          AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = t.oid
                                             AND g.tgname = '${FENCE_FUNCTION}' AND g.tgenabled = 'A'))
                         OR (t.relowner <> fenced AND t.relkind IN ('r', 'p', 'S', 'v', 'm', 'f'))))
         OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
                     WHERE ${OF_SCHEMA}
                       AND d.classid = 'pg_catalog.pg_proc'::regclass AND p.proname = '${FENCE_FUNCTION}'
                       AND p.proowner <> fenced)
         -- The other routines may have kept their owner; none of them is created, replaced or altered.
         OR EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() c
                     WHERE c.classid = 'pg_catalog.pg_proc'::regclass
                       AND c.schema_name = (SELECT nspname FROM pg_namespace WHERE oid = ns)) THEN
        hit := (SELECT nspname FROM pg_namespace WHERE oid = ns);
        EXIT;
      END IF;
    END LOOP;
    -- A routine a sealed table runs, through its trigger (the fence function) or a column default (next_id),
    -- found from the routine through pg_depend's index on the referenced object: a routine moved out of a sealed
    -- schema by SET SCHEMA is reported in its new one, and replaced there its body would run in place of the
    -- fence. Every CREATE FUNCTION of every shard's init passes here: one index lookup each (a loop, so that the
    -- lookup is planned for one oid, not joined to a whole scan of pg_depend).
    FOR fn IN SELECT c.objid FROM pg_event_trigger_ddl_commands() c
               WHERE hit IS NULL AND c.classid = 'pg_catalog.pg_proc'::regclass LOOP
      SELECT n.nspname INTO hit
        FROM pg_depend d
        JOIN pg_class t ON t.oid = CASE d.classid
                                     WHEN 'pg_catalog.pg_trigger'::regclass THEN (SELECT g.tgrelid FROM pg_trigger g WHERE g.oid = d.objid)
                                     WHEN 'pg_catalog.pg_attrdef'::regclass THEN (SELECT a.adrelid FROM pg_attrdef a WHERE a.oid = d.objid)
                                   END
        JOIN pg_namespace n ON n.oid = t.relnamespace
       WHERE d.refclassid = 'pg_catalog.pg_proc'::regclass AND d.refobjid = fn AND n.nspowner = fenced
       LIMIT 1;
      EXIT WHEN hit IS NOT NULL;
    END LOOP;
  END IF;
  IF hit IS NOT NULL THEN
    ${refuse};
  END IF;
END
$keep$;
DO $install$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = '${FENCE_GUARD_TRIGGERS[0]}') THEN
    CREATE EVENT TRIGGER ${FENCE_GUARD_TRIGGERS[0]} ON ddl_command_end EXECUTE FUNCTION ${GUARD_SCHEMA}.keep_seals();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = '${FENCE_GUARD_TRIGGERS[1]}') THEN
    CREATE EVENT TRIGGER ${FENCE_GUARD_TRIGGERS[1]} ON sql_drop EXECUTE FUNCTION ${GUARD_SCHEMA}.keep_seals();
  END IF;
END
$install$;
ALTER EVENT TRIGGER ${FENCE_GUARD_TRIGGERS[0]} ENABLE ALWAYS;
ALTER EVENT TRIGGER ${FENCE_GUARD_TRIGGERS[1]} ENABLE ALWAYS`;
}

/** Drops the guard when no sealed copy is left on the server (cleanup runs it after dropping old copies). */
export function dropFenceGuardIfUnusedSql(): string {
  return `DO $unused$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE r.rolname = '${FENCED_ROLE}') THEN
    DROP EVENT TRIGGER IF EXISTS ${FENCE_GUARD_TRIGGERS[0]};
    DROP EVENT TRIGGER IF EXISTS ${FENCE_GUARD_TRIGGERS[1]};
  END IF;
END
$unused$`;
}

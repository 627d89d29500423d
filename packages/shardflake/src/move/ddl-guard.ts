import type pg from 'pg';
import { ShardflakeError } from '../errors/errors.js';
import { requireOwnedSchema } from '../fence/privileges.js';
import type { Queryable } from '../postgres/connect.js';
import { quoteLiteral } from '../postgres/identifier.js';

/**
 * Refuses DDL on a shard schema while it is being moved, whoever runs it. `cluster migrate` already skips shards
 * in state `moving`; this guard also stops DDL typed by hand (psql, an ORM's migration tool), which would otherwise
 * break the move's replication half-way (the move would notice and roll back, but the DDL would be lost on the
 * copy). An event trigger on the source server (`ddl_command_end`) raises SQLSTATE 55006 (object in use) when a
 * command touches a schema listed in `shardflake_move.moving`. The move's own DDL on that schema (the fence) sets
 * `shardflake.move_ddl` locally to pass — a switch that works only for the role that installed the guard (any role
 * may SET a custom setting; not every role owns `shardflake_move`). The trigger exists only while some move from that server is running: the
 * last move to end drops it, so ordinary DDL elsewhere (e.g. `cluster init`) pays nothing between moves.
 *
 * Event triggers need a superuser; without one the move refuses to start (INSUFFICIENT_PRIVILEGE) rather than
 * skip the guard. The schema `shardflake_move` is used only when this role owns it and no other role may create
 * objects in it (privileges.ts: a function planted there would run as the superuser).
 */
export const DDL_GUARD_SCHEMA = 'shardflake_move';
export const DDL_BYPASS_SETTING = 'shardflake.move_ddl';

const INSTALL_SQL = `
CREATE SCHEMA IF NOT EXISTS shardflake_move;
CREATE TABLE IF NOT EXISTS shardflake_move.moving (schema_name text PRIMARY KEY, move_id bigint NOT NULL);
-- The guard runs as whoever issues the DDL: every role must be able to read which schemas are moving.
GRANT USAGE ON SCHEMA shardflake_move TO PUBLIC;
GRANT SELECT ON shardflake_move.moving TO PUBLIC;
CREATE OR REPLACE FUNCTION shardflake_move.refuse_ddl() RETURNS event_trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $guard$
DECLARE
  hit text;
BEGIN
  -- The switch works only for the role that installed the guard (or its members): any role can SET the setting.
  IF coalesce(current_setting('${DDL_BYPASS_SETTING}', true), '') = 'on'
     AND pg_has_role(current_user, (SELECT nspowner FROM pg_namespace WHERE nspname = 'shardflake_move'), 'USAGE') THEN
    RETURN;
  END IF;
  SELECT m.schema_name INTO hit
    FROM pg_event_trigger_ddl_commands() c JOIN shardflake_move.moving m ON m.schema_name = c.schema_name
   LIMIT 1;
  IF hit IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = '55006',
      MESSAGE = format('schema %s is being moved to another server; DDL on it is refused until the move ends', hit),
      HINT = 'run it with shardflake cluster migrate after the move';
  END IF;
END
$guard$;
DO $install$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'shardflake_move_ddl_guard') THEN
    CREATE EVENT TRIGGER shardflake_move_ddl_guard ON ddl_command_end EXECUTE FUNCTION shardflake_move.refuse_ddl();
  END IF;
END
$install$`;

/**
 * Refuses, before a move makes anything, a source where the DDL guard could not be installed: event triggers need
 * a superuser, and the guard's schema must be ours (see privileges.ts).
 */
export async function requireGuardable(source: pg.Client): Promise<void> {
  const { rows } = await source.query('SELECT rolsuper FROM pg_roles WHERE rolname = current_user');
  if (!(rows[0] as { rolsuper: boolean } | undefined)?.rolsuper) {
    throw new ShardflakeError(
      'INSUFFICIENT_PRIVILEGE',
      'the DDL guard of a move needs a superuser on the source (event triggers); the move does not run without it (see docs/security.md)',
    );
  }
  await requireOwnedSchema(source, DDL_GUARD_SCHEMA);
}

/** Lists every schema of a set as moving, in one transaction. */
export async function guardSchemas(
  source: pg.Client,
  schemas: readonly string[],
  moveId: bigint,
): Promise<boolean> {
  await requireGuardable(source);
  await source.query('BEGIN');
  try {
    await source.query(INSTALL_SQL);
    await source.query('LOCK TABLE shardflake_move.moving IN EXCLUSIVE MODE');
    await source.query(
      `INSERT INTO shardflake_move.moving (schema_name, move_id) SELECT unnest($1::text[]), $2
       ON CONFLICT (schema_name) DO UPDATE SET move_id = EXCLUDED.move_id`,
      [schemas, moveId],
    );
    await source.query('COMMIT');
    return true;
  } catch (error) {
    await source.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** Removes `schema` from the guard; drops the guard when no move from this server is left. */
export async function unguardSchemas(source: pg.Client, schemas: readonly string[]): Promise<void> {
  const { rows } = await source.query("SELECT to_regclass('shardflake_move.moving') IS NOT NULL AS ok");
  if (!(rows[0] as { ok: boolean }).ok) return;
  await source.query('BEGIN');
  try {
    await source.query('LOCK TABLE shardflake_move.moving IN EXCLUSIVE MODE');
    await source.query('DELETE FROM shardflake_move.moving WHERE schema_name = ANY($1::text[])', [schemas]);
    const left = await source.query('SELECT count(*)::int AS n FROM shardflake_move.moving');
    if ((left.rows[0] as { n: number }).n === 0) {
      await source.query('DROP EVENT TRIGGER IF EXISTS shardflake_move_ddl_guard');
    }
    await source.query('COMMIT');
  } catch (error) {
    await source.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** `SET LOCAL` that lets the move's own DDL (fence, unfence) through the guard; run inside a transaction. */
export function bypassGuardSql(): string {
  return `SET LOCAL ${DDL_BYPASS_SETTING} = ${quoteLiteral('on')}`;
}

/** Runs the move's own DDL on a guarded schema, in one transaction that passes the guard. */
export async function ddlPastGuard(client: Queryable, sql: string): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query(bypassGuardSql());
    await client.query(sql);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

import type { Queryable } from '../postgres/connect.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';

/**
 * The fence on the old copy of a moved shard. A trigger on every table of the schema raises SQLSTATE `SF001` on
 * INSERT, UPDATE, DELETE and TRUNCATE, so a stale router or a client writing straight to the old server gets an
 * error it can recognise (the router refreshes its map and retries) instead of a row that silently goes nowhere.
 *
 * Why a trigger and not the alternatives: REVOKE does not stop a superuser or the table owner, which is who
 * usually writes; renaming the schema turns a stale write into "relation does not exist" (42P01), which a router
 * cannot tell from a real bug, and it breaks reads of the old copy during verification. A trigger stops every role
 * (short of `session_replication_role = replica`, which only replication tools set), keeps the data readable for
 * comparison, and is installed in the same transaction that paused writes, so there is no moment with two
 * writable copies. The fence function also marks the schema as an old copy for `cluster cleanup`.
 */
export const FENCE_FUNCTION = '_shardflake_fence';
export const FENCED_SQLSTATE = 'SF001';

/** Statements (for one transaction) that fence `tables` of `schema`; idempotent. */
export function fenceSql(schema: string, tables: readonly string[], message: string): string {
  const fn = qualified(schema, FENCE_FUNCTION);
  return [
    `CREATE OR REPLACE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $fence$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '${FENCED_SQLSTATE}', MESSAGE = ${quoteLiteral(message)};
END
$fence$`,
    ...tables.flatMap((t) => [
      `DROP TRIGGER IF EXISTS ${quoteIdent(FENCE_FUNCTION)} ON ${qualified(schema, t)}`,
      `CREATE TRIGGER ${quoteIdent(FENCE_FUNCTION)} BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${qualified(schema, t)} FOR EACH STATEMENT EXECUTE FUNCTION ${fn}()`,
    ]),
    `COMMENT ON SCHEMA ${quoteIdent(schema, 'schema')} IS ${quoteLiteral(`shardflake: fenced old copy. ${message}`)}`,
  ].join(';\n');
}

/** Removes the fence (only for rolling back a move whose catalog switch never happened). */
export function unfenceSql(schema: string): string {
  // DROP FUNCTION … CASCADE takes every fence trigger with it.
  return [
    `DROP FUNCTION IF EXISTS ${qualified(schema, FENCE_FUNCTION)}() CASCADE`,
    `COMMENT ON SCHEMA ${quoteIdent(schema, 'schema')} IS NULL`,
  ].join(';\n');
}

export async function isFenced(client: Queryable, schema: string): Promise<boolean> {
  const { rows } = await client.query(
    `SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                    WHERE n.nspname = $1 AND p.proname = $2) AS fenced`,
    [schema, FENCE_FUNCTION],
  );
  return (rows[0] as { fenced: boolean }).fenced;
}

/** Which of `schemas` are fenced on this server (one query for a set of shards). */
export async function fencedSchemas(client: Queryable, schemas: readonly string[]): Promise<Set<string>> {
  const { rows } = await client.query(
    `SELECT n.nspname::text AS s FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = ANY($1::text[]) AND p.proname = $2`,
    [schemas, FENCE_FUNCTION],
  );
  return new Set((rows as { s: string }[]).map((r) => r.s));
}

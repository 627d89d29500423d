/*
 * fence/: Who may write a shard's copy: the fence on a moved shard's old copy (its trigger, guard function and
 * role), the privileges it relies on, strays (writes that reach a fenced copy), and the per-shard lock that keeps
 * moves and migrations apart (shard-lock.ts).
 *
 * May import: errors, postgres, config, topology, catalog.
 */
import type { Queryable } from '../postgres/connect.js';
import { qualified, quoteIdent, quoteLiteral, validateIdentifier } from '../postgres/identifier.js';
import { fenceGuardSql, OF_SCHEMA } from './guard.js';
import { FENCE_FUNCTION, FENCED_ROLE } from './names.js';

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
 *
 * Sealing (after the catalog switch, `sealOldCopiesSql`). A trigger alone has three holes, each a way for a stale
 * tool or a careless script to write rows into a copy the catalog no longer serves (rows lost at cleanup):
 * 1. `session_replication_role = replica` skips ordinary triggers (what bulk loaders and replication tools set):
 *    the seal turns the fence trigger `ENABLE ALWAYS`, which fires in every mode.
 * 2. The table's owner (usually the config's role) may `ALTER TABLE … DISABLE TRIGGER`, `DROP TRIGGER` or drop
 *    the fence function: the seal gives the schema, its tables, sequences and the fence function to
 *    `shardflake_fenced`, a role that cannot log in and has no members, so no login role but a superuser owns
 *    them any more. The fence function must go too: its owner could `ALTER FUNCTION … SET SCHEMA` it into a
 *    schema of its own (that needs CREATE only there), replace its body with one that returns, and the triggers,
 *    which call it by oid, would let writes through. The shard's other routines (the generator's `next_id`
 *    family, a lookup's trigger functions) keep their owner: no write reaches them before the fence has raised
 *    (a BEFORE … FOR EACH STATEMENT trigger fires before any row, default or row trigger is computed), and their
 *    owner cannot change what runs in the schema: CREATE OR REPLACE and RENAME need CREATE on the schema
 *    (revoked from everyone, and the schema is `shardflake_fenced`'s), a drop or an ALTER of them is refused by
 *    the guard (4). Giving them away too cost ten `ALTER ROUTINE`s per shard, each growing with the shards on
 *    the server (docs/benchmarks.md, "Sealing an old copy at scale"); seals made before keep them fenced, and
 *    both shapes are sealed for `isSealed` and the guard.
 * 3. Rights on the tables beyond reading and writing rows (TRUNCATE, TRIGGER, REFERENCES, and CREATE on the
 *    schema) are revoked from everyone. The former owner is granted SELECT, INSERT, UPDATE and DELETE (and USAGE
 *    on the schema): a stale read still sees the rows as of the cutover, and a stale write still meets the
 *    fence's SF001 — which a router answers by refreshing its map — rather than a permission error.
 * 4. A superuser's tools (pg_restore --disable-triggers, a script dropping triggers): guard.ts, installed with
 *    the first seal, refuses DDL that would leave a sealed schema's fence, owners or objects changed, any drop
 *    in it, and any DDL on its routines or on a routine its triggers or defaults run — from every role.
 * Only `cluster cleanup` (a superuser dropping the schema) lifts a seal. A superuser who drops the guard first can
 * still do anything; what the seal stops is every other role, and every accident of a superuser's tools.
 * Why only after the switch: before it a failed move unfences the source (settle.ts), which would then have to
 * give the tables back to their owners; after it the old copy is never written again, so the seal is for good.
 * The copy in the making on the target keeps an ordinary trigger: the subscription fills it in replica mode.
 */
export { FENCE_FUNCTION, FENCED_ROLE } from './names.js';
/**
 * The SQLSTATE a fenced copy of a shard raises on every write: the shard has moved, so the writer should refresh
 * its map and write to the new home.
 */
export const FENCED_SQLSTATE = 'SF001';

/** One shard's fence: the schema, its tables, and what a write there is told. */
export interface Fence {
  schema: string;
  tables: readonly string[];
  message: string;
}

/** Statements (for one transaction) that fence `tables` of `schema`; idempotent. */
export function fenceSql(schema: string, tables: readonly string[], message: string): string {
  return fencesSql([{ schema, tables, message }]);
}

/**
 * `fenceSql` for many schemas in one transaction. Every fence function is created before any trigger names one:
 * a CREATE FUNCTION throws away PostgreSQL's by-name function lists, and each `CREATE TRIGGER … EXECUTE FUNCTION`
 * then reads the list of every schema's `_shardflake_fence` again — as many rows as the server has fenced copies
 * (the copies a set is making on its target, the old copies a rebalance leaves on its source). Functions first,
 * the list is read once per batch instead of once per shard.
 */
export function fencesSql(fences: readonly Fence[]): string {
  const fn = (schema: string) => qualified(schema, FENCE_FUNCTION);
  return [
    ...fences.map(
      ({
        schema,
        message,
      }) => `CREATE OR REPLACE FUNCTION ${fn(schema)}() RETURNS trigger LANGUAGE plpgsql AS $fence$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '${FENCED_SQLSTATE}', MESSAGE = ${quoteLiteral(message)};
END
$fence$`,
    ),
    ...fences.flatMap(({ schema, tables, message }) => [
      ...tables.flatMap((t) => [
        `DROP TRIGGER IF EXISTS ${quoteIdent(FENCE_FUNCTION)} ON ${qualified(schema, t)}`,
        `CREATE TRIGGER ${quoteIdent(FENCE_FUNCTION)} BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${qualified(schema, t)} FOR EACH STATEMENT EXECUTE FUNCTION ${fn(schema)}()`,
      ]),
      `COMMENT ON SCHEMA ${quoteIdent(schema, 'schema')} IS ${quoteLiteral(`shardflake: fenced old copy. ${message}`)}`,
    ]),
  ].join(';\n');
}

/**
 * Fences every table `schema` has on this node now (a leftover copy found writable: cleanup, fence-strays.ts);
 * false when it was fenced already.
 */
export async function fenceSchema(client: Queryable, schema: string, message: string): Promise<boolean> {
  if (await isFenced(client, schema)) return false;
  const { rows } = await client.query(
    `SELECT c.relname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1`,
    [schema],
  );
  await client.query(
    fenceSql(
      schema,
      (rows as { name: string }[]).map((r) => r.name),
      message,
    ),
  );
  return true;
}

/** Removes the fence (only for rolling back a move whose catalog switch never happened). */
export function unfenceSql(schema: string): string {
  return unfencesSql([schema]);
}

/**
 * `unfenceSql` for many schemas: one DROP FUNCTION names them all, so PostgreSQL looks every one up (a read of
 * every schema's `_shardflake_fence`, see `fencesSql`) before it drops any.
 */
export function unfencesSql(schemas: readonly string[]): string {
  if (schemas.length === 0) return '';
  // DROP FUNCTION … CASCADE takes every fence trigger with it.
  return [
    `DROP FUNCTION IF EXISTS ${schemas.map((schema) => `${qualified(schema, FENCE_FUNCTION)}()`).join(', ')} CASCADE`,
    ...schemas.map((schema) => `COMMENT ON SCHEMA ${quoteIdent(schema, 'schema')} IS NULL`),
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

/**
 * Statements (for one transaction, past the DDL guard: run them with the move's `ddlPastGuard`) that seal the
 * fenced old copies `schemas` (see the top of this file); idempotent, so a resumed move or cleanup can rerun it.
 * Raises (SQLSTATE 42501) when `shardflake_fenced` exists but can log in or has members: such a role could lift
 * the fence, so the seal refuses rather than pretend.
 */
export function sealOldCopiesSql(schemas: readonly string[]): string {
  const role = quoteLiteral(FENCED_ROLE);
  const head = `DO $seal$
BEGIN
  BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = ${role}) THEN
      CREATE ROLE ${quoteIdent(FENCED_ROLE)} NOLOGIN NOINHERIT;
    END IF;
  EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- another seal on this server created it at the same moment
  END;
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = ${role} AND (rolcanlogin OR rolsuper OR rolbypassrls))
     OR EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid WHERE r.rolname = ${role}) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = 'role ${FENCED_ROLE} can log in or has members, so it could lift the fence of moved shards',
      HINT = 'make it NOLOGIN NOSUPERUSER and revoke its memberships: ALTER ROLE ${FENCED_ROLE} NOLOGIN; REVOKE ${FENCED_ROLE} FROM <member>';
  END IF;
END
$seal$`;
  return [head, ...schemas.map((schema) => sealOneSql(schema)), fenceGuardSql()].join(';\n');
}

function sealOneSql(schema: string): string {
  const nsp = quoteLiteral(validateIdentifier(schema, 'schema'));
  const fence = quoteLiteral(FENCE_FUNCTION);
  const role = quoteIdent(FENCED_ROLE);
  return `DO $seal$
DECLARE
  ns oid := (SELECT oid FROM pg_namespace WHERE nspname = ${nsp});
  fenced oid := (SELECT oid FROM pg_roles WHERE rolname = ${quoteLiteral(FENCED_ROLE)});
  r record;
BEGIN
  IF ns IS NULL THEN RETURN; END IF;
  -- The schema's relations and routines are found through their dependency on the schema (pg_depend's index on
  -- the referenced object: every table, view, sequence and routine records one when it is made), not by
  -- scanning pg_class and pg_proc, which hold every shard's objects (4 scans per seal: 65 ms at 2,048 shards on
  -- a server, growing with them).
  -- The fence fires in every session_replication_role.
  FOR r IN SELECT t.tgrelid::regclass AS rel FROM pg_depend d JOIN pg_trigger t ON t.tgrelid = d.objid
            WHERE ${OF_SCHEMA} AND d.classid = 'pg_catalog.pg_class'::regclass AND t.tgname = ${fence} AND t.tgenabled <> 'A' LOOP
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', r.rel, ${fence});
  END LOOP;
  -- Rights that reach past rows (TRUNCATE, TRIGGER, REFERENCES, MAINTAIN …), from everyone. Reads and row writes
  -- stay: a write meets the fence and gets SF001, the answer a stale router knows to retry elsewhere.
  FOR r IN SELECT c.oid::regclass AS rel, a.grantee, a.privilege_type AS what
             FROM pg_depend d JOIN pg_class c ON c.oid = d.objid CROSS JOIN LATERAL aclexplode(c.relacl) a
            WHERE ${OF_SCHEMA} AND d.classid = 'pg_catalog.pg_class'::regclass AND c.relnamespace = ns AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.grantee <> c.relowner
              AND a.grantee <> fenced AND a.privilege_type NOT IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE') LOOP
    EXECUTE format('REVOKE %s ON TABLE %s FROM %s', r.what, r.rel,
                   CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.grantee::regrole::text) END);
  END LOOP;
  FOR r IN SELECT c.oid::regclass AS rel, c.relowner::regrole AS owner FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
            WHERE ${OF_SCHEMA} AND d.classid = 'pg_catalog.pg_class'::regclass AND c.relnamespace = ns
              AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relowner <> fenced LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO ${role}', r.rel);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s TO %s', r.rel, quote_ident(r.owner::text));
  END LOOP;
  -- Sequences a table owns moved with it; the others move here.
  FOR r IN SELECT c.oid::regclass AS rel FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
            WHERE ${OF_SCHEMA} AND d.classid = 'pg_catalog.pg_class'::regclass AND c.relnamespace = ns
              AND c.relkind = 'S' AND c.relowner <> fenced LOOP
    EXECUTE format('ALTER SEQUENCE %s OWNER TO ${role}', r.rel);
  END LOOP;
  -- Of the routines, only the fence function changes owner (why only it: the top of this file). ALTER ROUTINE
  -- finds a routine through the list of every schema's routine of that name, rebuilt after each change to
  -- pg_proc: ten routines per shard cost 3.9 ms each at 2,048 shards on a server; this one name is in fenced
  -- copies only. Old seals gave every routine away; a resumed seal finds nothing left to do either way.
  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
            WHERE ${OF_SCHEMA} AND d.classid = 'pg_catalog.pg_proc'::regclass AND p.pronamespace = ns
              AND p.proname = ${fence} AND p.proowner <> fenced LOOP
    EXECUTE format('ALTER ROUTINE %s OWNER TO ${role}', r.fn);
  END LOOP;
  FOR r IN SELECT a.grantee FROM pg_namespace n CROSS JOIN LATERAL aclexplode(n.nspacl) a
            WHERE n.oid = ns AND a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner LOOP
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM %s', ${nsp},
                   CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.grantee::regrole::text) END);
  END LOOP;
  FOR r IN SELECT n.nspowner::regrole AS owner FROM pg_namespace n WHERE n.oid = ns AND n.nspowner <> fenced LOOP
    EXECUTE format('ALTER SCHEMA %I OWNER TO ${role}', ${nsp});
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %s', ${nsp}, quote_ident(r.owner::text));
  END LOOP;
END
$seal$`;
}

/**
 * Whether `schema`'s old copy is sealed: the schema, its relations and its fence function owned by
 * `shardflake_fenced`, every fence trigger `ENABLE ALWAYS` (its other routines may have any owner: fence.ts).
 */
export async function isSealed(client: Queryable, schema: string): Promise<boolean> {
  const { rows } = await client.query(
    `SELECT n.nspowner = r.oid
            AND EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                         WHERE c.relnamespace = n.oid AND t.tgname = $2)
            AND NOT EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                             WHERE c.relnamespace = n.oid AND t.tgname = $2 AND t.tgenabled <> 'A')
            AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relowner <> r.oid
                               AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S'))
            AND NOT EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = n.oid AND p.proname = $2
                               AND p.proowner <> r.oid) AS sealed
       FROM pg_namespace n, pg_roles r WHERE n.nspname = $1 AND r.rolname = $3`,
    [schema, FENCE_FUNCTION, FENCED_ROLE],
  );
  return (rows[0] as { sealed: boolean } | undefined)?.sealed === true;
}

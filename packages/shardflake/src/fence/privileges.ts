import type pg from 'pg';
import type { ClusterConfig } from '../config/config.js';
import { isShardflakeError, ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';
import { quoteLiteral } from '../postgres/identifier.js';
import { TRUSTED_OWNER } from '../postgres/trusted-owner.js';
import { connectServer } from '../topology/connections.js';
import { FENCED_ROLE } from './names.js';

/**
 * What each command needs on each server, checked before it changes anything, so that a command run with too few
 * rights says so in one line instead of failing half-way (or, as the DDL guard once did, quietly doing less).
 * docs/security.md gives the same table with the reasons; the two are kept in one place here (`NEEDS`).
 *
 * - status, dashboard, router: read the catalog (USAGE on schema `shardflake`, SELECT on its tables); the router
 *   also reads and writes the shard tables. No superuser.
 * - init: CREATE on each server's database (to create the shard schemas and the catalog); any `shardflake`
 *   schema already there must be the running role's (a schema someone else owns could hold their objects).
 * - migrate: owns (or is a member of the owner of) every shard schema it finds on each server.
 * - move, rebalance, cleanup: superuser on the servers involved. PostgreSQL 15–18 allow no less for what a move
 *   does: the DDL guard is an event trigger (superuser only); a subscription whose connection string carries no
 *   password must be a superuser's (PostgreSQL 16+ lets members of pg_create_subscription subscribe, but only with
 *   a password in the connection string, stored in pg_subscription — exactly what shardflake keeps out); the
 *   copy sets session_replication_role; the seal gives the old copy to a role no one else may be a member of.
 */
export const COMMANDS = [
  'init',
  'migrate',
  'move',
  'rebalance',
  'cleanup',
  'status',
  'dashboard',
  'router',
] as const;
export type PrivilegedCommand = (typeof COMMANDS)[number];

/** What a role has on one server, as one query reads it. */
export interface RoleFacts {
  server: string;
  user: string;
  superuser: boolean;
  /** CREATE on the current database. */
  createSchemas: boolean;
  /** On the catalog server only: may read the catalog (null: no catalog yet). */
  readsCatalog: boolean | null;
  /** Owner of an existing `shardflake` schema, when it is not the running role (or a role it belongs to). */
  foreignCatalogOwner: string | null;
  /** Shard schemas on this server the role does not own (count), and the ones it cannot use (no USAGE). */
  shardSchemasNotOwned: number;
  shardSchemasNotUsable: number;
  /** Shard tables the role may not SELECT, INSERT, UPDATE and DELETE, and sequences (id counters) it may not use. */
  shardTablesNotWritable: number;
}

type Need = (f: RoleFacts, catalog: boolean) => string | null;

const superuser: Need = (f) =>
  f.superuser
    ? null
    : 'superuser (event triggers for the DDL guard, a subscription with no password in its connection string, the seal of old copies)';
const readCatalog: Need = (f, catalog) =>
  catalog && f.readsCatalog === false ? 'USAGE on schema shardflake and SELECT on its tables' : null;
const catalogMissing: Need = (f, catalog) =>
  catalog && f.readsCatalog === null
    ? 'a catalog (schema shardflake): run shardflake cluster init first'
    : null;
const createSchemas: Need = (f) => (f.createSchemas ? null : 'CREATE on the database (to create schemas)');
const ownCatalog: Need = (f, catalog) =>
  catalog && f.foreignCatalogOwner !== null
    ? `ownership of schema shardflake, which role ${f.foreignCatalogOwner} owns (another role's schema could hold its objects)`
    : null;
const ownShards: Need = (f) =>
  f.shardSchemasNotOwned > 0
    ? `ownership of ${f.shardSchemasNotOwned} shard schema(s) it does not own`
    : null;
const useShards: Need = (f) =>
  f.shardSchemasNotUsable + f.shardTablesNotWritable > 0
    ? `USAGE on ${f.shardSchemasNotUsable} shard schema(s) and SELECT, INSERT, UPDATE, DELETE (USAGE for sequences) on ${f.shardTablesNotWritable} shard table(s) and sequence(s)`
    : null;

/** The one table of what each command needs (docs/security.md says why). */
export const NEEDS: Record<PrivilegedCommand, Need[]> = {
  init: [createSchemas, ownCatalog],
  migrate: [catalogMissing, readCatalog, ownShards],
  move: [catalogMissing, superuser],
  rebalance: [catalogMissing, superuser],
  cleanup: [catalogMissing, superuser],
  status: [readCatalog],
  dashboard: [readCatalog],
  router: [catalogMissing, readCatalog, useShards],
};

/** Reads what the connected role has on this server (one query). */
export async function roleFacts(
  client: Queryable,
  server: string,
  schemaPrefix: string,
  catalog: boolean,
): Promise<RoleFacts> {
  // Sealed old copies of moved shards (owned by shardflake_fenced, fence.ts) are nobody's to use or migrate.
  const shardSchemas = `SELECT oid, nspowner FROM pg_namespace WHERE nspname ~ ('^' || ${quoteLiteral(schemaPrefix)} || '[0-9]{4}$')
                          AND nspowner IS DISTINCT FROM (SELECT oid FROM pg_roles WHERE rolname = ${quoteLiteral(FENCED_ROLE)})`;
  const { rows } = await client.query(
    `SELECT current_user::text AS "user",
            (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser,
            has_database_privilege(current_database(), 'CREATE') AS "createSchemas",
            -- By oid: a name lookup in a schema the role may not use would fail instead of answering.
            (SELECT CASE WHEN NOT $1::boolean OR count(*) = 0 THEN NULL
                         ELSE bool_and(has_schema_privilege(c.relnamespace, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')) END
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'shardflake' AND c.relname IN ('shards', 'cluster')) AS "readsCatalog",
            (SELECT nspowner::regrole::text FROM pg_namespace n
              WHERE nspname = 'shardflake' AND NOT ${TRUSTED_OWNER}) AS "foreignCatalogOwner",
            (SELECT count(*)::int FROM (${shardSchemas}) s WHERE NOT pg_has_role(current_user, s.nspowner, 'USAGE')) AS "shardSchemasNotOwned",
            (SELECT count(*)::int FROM (${shardSchemas}) s WHERE NOT has_schema_privilege(s.oid, 'USAGE')) AS "shardSchemasNotUsable",
            (SELECT count(*)::int FROM pg_class c JOIN (${shardSchemas}) s ON s.oid = c.relnamespace
              WHERE (c.relkind IN ('r', 'p') AND c.relname NOT LIKE '\\_shardflake\\_%'
                     AND NOT has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE'))
                 OR (c.relkind = 'S' AND NOT has_sequence_privilege(c.oid, 'USAGE'))) AS "shardTablesNotWritable"`,
    [catalog],
  );
  return { server, ...(rows[0] as Omit<RoleFacts, 'server'>) };
}

/** What `command` lacks on each server, one phrase per missing thing: empty when it may run. */
export function missingFor(command: PrivilegedCommand, facts: RoleFacts, catalog: boolean): string[] {
  return NEEDS[command].flatMap((need) => need(facts, catalog) ?? []);
}

export interface PrivilegeCheckOptions {
  /** Servers to check (default: every server of the config; the catalog's is always checked). */
  servers?: readonly string[];
}

/**
 * Refuses with INSUFFICIENT_PRIVILEGE, in one line that names the server, the role and what it lacks, when the
 * config's roles cannot run `command`; changes nothing. Connects to each server once; a server that does not
 * answer is skipped here (the command itself reports it).
 */
export async function checkPrivileges(
  config: Pick<ClusterConfig, 'catalog' | 'servers' | 'schemaPrefix'> & Partial<Pick<ClusterConfig, 'nodes'>>,
  command: PrivilegedCommand,
  options: PrivilegeCheckOptions = {},
): Promise<void> {
  const names = [...new Set([config.catalog, ...(options.servers ?? Object.keys(config.servers))])];
  const problems: string[] = [];
  await Promise.all(
    names.map(async (server) => {
      let client: pg.Client | undefined;
      try {
        try {
          client = await connectServer(config, server, { applicationName: 'shardflake privileges' });
        } catch (error) {
          // A server that does not answer is the command's to report, in its own way (status shows it as down).
          if (isShardflakeError(error, 'SERVER_UNREACHABLE') || isShardflakeError(error, 'NO_PRIMARY'))
            return;
          throw error;
        }
        const isCatalog = server === config.catalog;
        const facts = await roleFacts(client, server, config.schemaPrefix, isCatalog);
        const missing = missingFor(command, facts, isCatalog);
        if (missing.length > 0)
          problems.push(`on server ${server} role ${facts.user} lacks ${missing.join('; ')}`);
      } finally {
        await client?.end().catch(() => {});
      }
    }),
  );
  if (problems.length > 0) {
    throw new ShardflakeError(
      'INSUFFICIENT_PRIVILEGE',
      `cluster ${command} cannot run: ${problems.sort().join('; ')} (see docs/security.md)`,
    );
  }
}

/**
 * Refuses to use `schema` when it exists and belongs to a role the running role is not a member of, or when
 * another role may create objects in it: `CREATE SCHEMA IF NOT EXISTS` would otherwise adopt it, and a function
 * or trigger planted there would run with the running role's (often a superuser's) rights.
 */
export async function requireOwnedSchema(client: Queryable, schema: string): Promise<void> {
  const { rows } = await client.query(
    `SELECT n.nspowner::regrole::text AS owner, ${TRUSTED_OWNER} AS ours,
            (SELECT string_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, ', ')
               FROM aclexplode(n.nspacl) a
              WHERE a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner) AS creators
       FROM pg_namespace n WHERE n.nspname = $1`,
    [schema],
  );
  const row = rows[0] as { owner: string; ours: boolean; creators: string | null } | undefined;
  if (!row) return;
  if (!row.ours || row.creators !== null) {
    throw new ShardflakeError(
      'INSUFFICIENT_PRIVILEGE',
      row.ours
        ? `schema ${schema} lets ${row.creators} create objects in it; shardflake will not run its code there (REVOKE CREATE ON SCHEMA ${schema} FROM ${row.creators})`
        : `schema ${schema} exists and belongs to role ${row.owner}, not to this role; shardflake will not use a schema another role controls (drop it, or ALTER SCHEMA ${schema} OWNER TO the role that runs shardflake)`,
    );
  }
}

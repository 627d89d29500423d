import { readReferenceCopies } from '../catalog/reference-copies.js';
import type { ClusterConfig } from '../config/config.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { type Queryable, type ServerAccess, wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import { PREPARED_ON_SCHEMAS_SQL } from '../recovery/recovery.js';
import { closeAll, connectAll } from '../topology/connections.js';
import { serverOrder } from './order.js';
import { DIGESTS_AGAINST_ROWS_SQL, LIST_REFERENCE_TABLES_SQL } from './sql.js';
import { hasReference, type ReferenceState, readReferenceState } from './state.js';

/**
 * `cluster verify`'s reference check: every server's copy compared with the others.
 *
 * Per server: the copy exists, is synced (filled), at the config's reference migration, holds every config table,
 * and every table still has its write guard. Per table: row count and a checksum on every server — the md5 of the
 * rows' md5s in sorted order, each row as jsonb (keys sorted, so a column order that differs between servers does
 * not count as a difference, a value that differs does). Shard schemas holding a relation with a reference
 * table's name are reported too: inside their sessions it would hide the reference table.
 *
 * Exact, not approximate: the copies are read holding SHARE locks on every server's reference tables, taken in
 * server order (order.ts) like every writer's, so no reference write commits anywhere between the first server's
 * count and the last's (writers wait for the few milliseconds the check takes; readers do not).
 */
export interface ReferenceProblem {
  /**
   * The configured server whose copy has the problem (for a difference, the one that differs from the
   * first).
   */
  server: string;
  /** The reference table concerned, when there is one. */
  table?: string;
  /** One sentence saying what is wrong and, where there is one, the command that fixes it. */
  message: string;
}

interface TableDigest {
  rows: number;
  checksum: string;
}

async function digest(client: Queryable, table: string): Promise<TableDigest> {
  const name = qualified(REFERENCE_SCHEMA, table);
  const { rows } = await client.query(
    `SELECT count(*)::int AS rows, coalesce(md5(string_agg(h, '' ORDER BY h)), md5('')) AS checksum
       FROM (SELECT md5(to_jsonb(t)::text) AS h FROM ${name} t) s`,
  );
  return rows[0] as TableDigest;
}

/** The problems of the reference copies on the servers of `clients` (one client per configured server). */
export async function verifyReference(
  config: Pick<ClusterConfig, 'servers' | 'schemaPrefix' | 'referenceTables' | 'referenceMigrations'> &
    Partial<Pick<ClusterConfig, 'catalog'>>,
  clients: ReadonlyMap<string, Queryable>,
  options: { lockTimeoutMs?: number } = {},
): Promise<ReferenceProblem[]> {
  const problems: ReferenceProblem[] = [];
  const order = serverOrder(config).filter((s) => clients.has(s));
  const states = new Map<string, ReferenceState | null>();
  for (const server of order) states.set(server, await readReferenceState(clients.get(server) as Queryable));
  const anyCopy = [...states.values()].some((s) => s !== null);
  if (!hasReference(config) && !anyCopy) return problems;
  // A copy on a server this config does not name is written by every router but compared by no check run with it.
  const catalog = config.catalog === undefined ? undefined : clients.get(config.catalog);
  const listed = new Set([
    ...(catalog ? await readReferenceCopies(catalog) : []),
    ...[...states.values()].flatMap((s) => s?.copies ?? []),
  ]);
  for (const server of [...listed].sort()) {
    if (!(server in config.servers))
      problems.push({
        server,
        message: `server ${server} holds a copy of the reference tables (the catalog or a copy lists it) but is not in this config: add it, so that its copy is compared with the others`,
      });
  }

  // A prepared (in-doubt) reference write holds its locks until it is settled: the comparison below would wait for
  // it, and the copies legitimately differ until it is. Reported as such instead.
  let inDoubt = false;
  for (const server of order) {
    if (states.get(server) === null) continue;
    const { rows } = await (clients.get(server) as Queryable).query(PREPARED_ON_SCHEMAS_SQL, [
      [REFERENCE_SCHEMA],
    ]);
    for (const { gid } of rows as { gid: string }[]) {
      inDoubt = true;
      problems.push({
        server,
        message: `a prepared transaction (${gid}) holds the reference tables on server ${server}; the copies are compared once it is settled (shardflake cluster recover)`,
      });
    }
  }
  if (inDoubt) return problems;

  const names = config.referenceTables.map((t) => t.name);
  const open: Queryable[] = [];
  const digests = new Map<string, Map<string, TableDigest>>();
  try {
    for (const server of order) {
      const client = clients.get(server) as Queryable;
      const state = states.get(server) ?? null;
      if (state === null) {
        problems.push({
          server,
          message: `server ${server} has no reference tables (run shardflake cluster migrate)`,
        });
        continue;
      }
      if (!state.synced)
        problems.push({
          server,
          message: `server ${server}'s reference copy was never filled (run shardflake cluster migrate, or move a shard there)`,
        });
      if (state.version !== config.referenceMigrations.length)
        problems.push({
          server,
          message: `server ${server}'s reference tables are at reference migration ${state.version}, the config at ${config.referenceMigrations.length} (run shardflake cluster migrate)`,
        });
      for (const table of names) {
        if (!state.tables.includes(table))
          problems.push({ server, table, message: `server ${server} lacks reference table ${table}` });
      }
      await client.query(`BEGIN; SET LOCAL lock_timeout = ${Math.max(1, options.lockTimeoutMs ?? 5000)}`);
      open.push(client);
      const tables = ((await client.query(LIST_REFERENCE_TABLES_SQL)).rows as { name: string }[]).map(
        (r) => r.name,
      );
      if (tables.length > 0) {
        await client.query(
          `LOCK TABLE ${tables.map((t) => qualified(REFERENCE_SCHEMA, t)).join(', ')} IN SHARE MODE`,
        );
      }
      const { rows: unguarded } = await client.query(
        `SELECT c.relname::text AS name FROM pg_class c
          WHERE c.relnamespace = to_regnamespace($1) AND c.relname = ANY($2::text[])
            AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = '_shardflake_guard' AND g.tgenabled <> 'D')`,
        [REFERENCE_SCHEMA, tables],
      );
      for (const { name } of unguarded as { name: string }[]) {
        problems.push({
          server,
          table: name,
          message: `reference table ${name} on server ${server} has lost its write guard (a shard session could change this copy alone); run shardflake cluster migrate`,
        });
      }
      const { rows: hiding } = await client.query(
        `SELECT n.nspname::text AS schema, c.relname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relname = ANY($1::text[]) AND n.nspname ~ ('^' || $2 || '[0-9]{4}$') ORDER BY 1, 2`,
        [tables, config.schemaPrefix],
      );
      for (const { schema, name } of hiding as { schema: string; name: string }[]) {
        problems.push({
          server,
          table: name,
          message: `shard schema ${schema} on server ${server} has its own ${name}, which hides reference table ${name} in that shard's sessions`,
        });
      }
      const mine = new Map<string, TableDigest>();
      for (const table of tables) mine.set(table, await digest(client, table));
      digests.set(server, mine);
      // The digest withReference compares at commit (sql.ts) must match the rows, or every write would fail.
      if (state.sqlVersion >= 2) {
        const { rows: kept } = await client.query(DIGESTS_AGAINST_ROWS_SQL);
        for (const k of kept as {
          name: string;
          stored_rows: string | null;
          stored: string | null;
          rows: string;
          digest: string;
        }[]) {
          if (k.stored === k.digest && k.stored_rows === k.rows) continue;
          problems.push({
            server,
            table: k.name,
            message: `reference table ${k.name} on server ${server} holds ${k.rows} rows but its digest says ${k.stored_rows ?? 'nothing'}${k.stored_rows === k.rows ? ' (another digest)' : ''}: it was changed where the digest triggers did not see it; shardflake cluster migrate recomputes it once the rows agree`,
          });
        }
      }
    }
  } catch (error) {
    throw wrapPgError(error);
  } finally {
    await Promise.all(open.map((c) => c.query('ROLLBACK').catch(() => {})));
  }

  // Each table against the first server (in server order) that has it.
  const tables = new Set([...digests.values()].flatMap((m) => [...m.keys()]));
  for (const table of [...tables].sort()) {
    const holders = [...digests].filter(([, m]) => m.has(table));
    const [base, baseDigest] = [holders[0]?.[0] as string, holders[0]?.[1].get(table) as TableDigest];
    for (const [server, m] of holders.slice(1)) {
      const d = m.get(table) as TableDigest;
      if (d.rows !== baseDigest.rows || d.checksum !== baseDigest.checksum) {
        problems.push({
          server,
          table,
          message: `reference table ${table} differs on server ${server}: ${d.rows} rows (checksum ${d.checksum.slice(0, 12)}) against ${baseDigest.rows} rows (checksum ${baseDigest.checksum.slice(0, 12)}) on server ${base}`,
        });
      }
    }
    for (const server of digests.keys()) {
      if (!holders.some(([s]) => s === server) && !names.includes(table))
        problems.push({
          server,
          table,
          message: `server ${server} lacks reference table ${table}, which server ${base} has`,
        });
    }
  }
  return problems;
}

/** The reference check on its own: connects to every server, checks, disconnects (see verifyReference). */
export async function checkReferenceTables(config: ClusterConfig): Promise<ReferenceProblem[]> {
  const clients = await connectAll(config, { applicationName: 'shardflake verify' });
  try {
    return await verifyReference(config, clients);
  } finally {
    await closeAll(clients);
  }
}

/**
 * The check as `cluster verify` runs it (src/admin/verify.ts): one connection per server held for the whole
 * check (the copies are compared under locks on all of them at once), its problems as { check, where, what }.
 */
export const referenceCheck = {
  name: 'reference tables',
  async run(
    config: ClusterConfig,
    pools: ServerAccess,
  ): Promise<{ check: string; where: string; what: string }[]> {
    if (!hasReference(config)) return [];
    const order = serverOrder(config);
    const clients = new Map<string, Queryable>();
    const nested = (i: number): Promise<ReferenceProblem[]> => {
      const server = order[i];
      if (server === undefined) return verifyReference(config, clients);
      return pools.use(server, (client) => {
        clients.set(server, client);
        return nested(i + 1);
      });
    };
    return (await nested(0)).map((p) => ({
      check: 'reference tables',
      where: p.table === undefined ? `server ${p.server}` : `server ${p.server}, table ${p.table}`,
      what: p.message,
    }));
  },
};

import type { Queryable } from '../postgres/connect.js';

/**
 * The servers the cluster knows, in the catalog: each server's name and node addresses, never a password (the
 * URLs are stored with it removed; credentials stay with the config, the environment — PGPASSWORD — or
 * ~/.pgpass). `cluster init` and every move record the config's servers here, so a router whose config predates a
 * server added for a rebalance learns its address with the map (router/router.ts) and connects to it with the
 * credentials its own environment gives.
 */
export const SERVERS_SQL = `
CREATE TABLE IF NOT EXISTS shardflake.servers (
  name text PRIMARY KEY,
  nodes text[] NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);`;

/** A node URL without its password (user, host, port, database and parameters kept). */
export function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.password = '';
    return parsed.toString();
  } catch {
    return url.replace(/:\/\/([^:@/]+):[^@/]*@/, '://$1@');
  }
}

/** Records (or updates) each server's node addresses, passwords removed. */
export async function recordServers(
  catalog: Queryable,
  servers: Readonly<Record<string, readonly string[]>>,
): Promise<void> {
  const names = Object.keys(servers);
  if (names.length === 0) return;
  await catalog.query(SERVERS_SQL);
  await catalog.query(
    `INSERT INTO shardflake.servers (name, nodes)
     SELECT name, string_to_array(nodes, ' ') FROM unnest($1::text[], $2::text[]) AS x(name, nodes)
     ON CONFLICT (name) DO UPDATE SET nodes = excluded.nodes, updated_at = now()
       WHERE shardflake.servers.nodes IS DISTINCT FROM excluded.nodes`,
    [names, names.map((n) => (servers[n] ?? []).map(withoutPassword).join(' '))],
  );
}

/** Every server the catalog knows, with its node addresses (no passwords); empty before the table exists. */
export async function readServers(catalog: Queryable): Promise<Map<string, string[]>> {
  const exists = await catalog.query("SELECT to_regclass('shardflake.servers') IS NOT NULL AS ok");
  if (!(exists.rows[0] as { ok: boolean }).ok) return new Map();
  const { rows } = await catalog.query('SELECT name, nodes FROM shardflake.servers ORDER BY name');
  return new Map((rows as { name: string; nodes: string[] }[]).map((r) => [r.name, r.nodes]));
}

import type pg from 'pg';
import { ShardflakeError } from '../errors/errors.js';
import { connect, describeUrl, type Queryable, wrapPgError } from '../postgres/connect.js';
import type { NodeRole } from './nodes.js';

/**
 * Which node of a server is the primary, found by asking each node (`pg_is_in_recovery()`), never by the order of
 * the config: after a failover the HA tool (Patroni, a managed service, someone running `pg_ctl promote`) has made
 * a replica the primary, and shardflake follows it. shardflake never promotes anything itself.
 */
export interface NodeProbe {
  url: string;
  /** The URL with its password redacted. */
  node: string;
  role: NodeRole;
  /** pg_control_system().system_identifier: the same on a primary and every streaming replica made from it. */
  systemId: string;
  database: string;
}

/** The one statement a probe sends: role, the cluster's identity and the database the URL points at. */
export const PROBE_SQL =
  'SELECT pg_is_in_recovery() AS in_recovery, (SELECT system_identifier::text FROM pg_control_system()) AS system_id, current_database() AS database';

export async function probeOn(client: Queryable, url: string): Promise<NodeProbe> {
  const row = (await client.query(PROBE_SQL)).rows[0] as {
    in_recovery: boolean;
    system_id: string;
    database: string;
  };
  return {
    url,
    node: describeUrl(url),
    role: row.in_recovery ? 'replica' : 'primary',
    systemId: row.system_id,
    database: row.database,
  };
}

/** Connects to one node and probes it; an unreachable node is SERVER_UNREACHABLE naming the node. */
export async function probeNode(url: string, connectTimeoutMs = 5000): Promise<NodeProbe> {
  let client: pg.Client | undefined;
  try {
    client = await connect(url, { connectTimeoutMs, applicationName: 'shardflake roles' });
    return await probeOn(client, url);
  } catch (error) {
    const wrapped = wrapPgError(error, url);
    throw new ShardflakeError(
      wrapped.code,
      `node ${describeUrl(url)}: ${wrapped.message.replace(/ at \S+/, '')}`,
      {
        cause: error,
        sqlState: wrapped.sqlState,
      },
    );
  } finally {
    await client?.end().catch(() => {});
  }
}

/**
 * Checks what a server's probed nodes say about themselves: exactly one primary, every other node a replica of
 * that same system (a node of another cluster in the list would silently serve other data). Returns the primary.
 */
export function primaryOf(server: string, probes: readonly NodeProbe[]): NodeProbe {
  const primaries = probes.filter((p) => p.role === 'primary');
  if (primaries.length > 1) {
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `server ${server} has ${primaries.length} primaries (${primaries.map((p) => p.node).join(', ')}); a server lists one primary and its streaming replicas`,
    );
  }
  const primary = primaries[0];
  if (!primary) {
    throw new ShardflakeError(
      'NO_PRIMARY',
      `server ${server} has no primary: every node (${probes.map((p) => p.node).join(', ')}) is a replica`,
    );
  }
  const stranger = probes.find((p) => p.systemId !== primary.systemId);
  if (stranger) {
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `server ${server}: node ${stranger.node} is not a replica of its primary ${primary.node} (another PostgreSQL system)`,
    );
  }
  return primary;
}

/**
 * Probes every node of a server and returns them with the primary checked. By default all must answer (a
 * command that cannot see a node fails before changing anything); `requireAll = false` settles for the nodes
 * that answer, as long as one of them is the primary.
 */
export async function findRoles(
  server: string,
  urls: readonly string[],
  connectTimeoutMs?: number,
  requireAll = true,
): Promise<{ primary: NodeProbe; nodes: NodeProbe[] }> {
  const settled = await Promise.allSettled(urls.map((url) => probeNode(url, connectTimeoutMs)));
  const failed = settled.find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined;
  const answered = settled.filter((r) => r.status === 'fulfilled');
  // A router may start while a replica is down (it serves from the primary); a command may not.
  if (failed && !requireAll && answered.length > 0) {
    const nodes = answered.map((r) => (r as PromiseFulfilledResult<NodeProbe>).value);
    return { primary: primaryOf(server, nodes), nodes };
  }
  if (failed) {
    const reason = failed.reason as ShardflakeError;
    throw new ShardflakeError(reason.code, `server ${server}: ${reason.message}`, {
      cause: reason,
      sqlState: reason.sqlState,
    });
  }
  const nodes = settled.map((r) => (r as PromiseFulfilledResult<NodeProbe>).value);
  return { primary: primaryOf(server, nodes), nodes };
}

/**
 * Two configured servers that are one database (the same system and database name; a replica of server a listed
 * as server b is one) would get the same shard schemas twice: refused, naming both.
 */
export function checkDistinctServers(probes: ReadonlyMap<string, readonly NodeProbe[]>): void {
  const owner = new Map<string, { server: string; node: string }>();
  for (const [server, nodes] of probes) {
    for (const p of nodes) {
      const key = `${p.systemId}/${p.database}`;
      const seen = owner.get(key);
      if (seen && seen.server !== server) {
        throw new ShardflakeError(
          'INVALID_CONFIG',
          `server ${server}: node ${p.node} is the same database as server ${seen.server}'s node ${seen.node} (one PostgreSQL system, e.g. a replica of it); list a server's replicas under that server`,
        );
      }
      owner.set(key, { server, node: p.node });
    }
  }
}

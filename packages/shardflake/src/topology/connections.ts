import type pg from 'pg';
import type { ClusterConfig } from '../config/config.js';
import { AuthFailedError, ShardflakeError } from '../errors/errors.js';
import { connect } from '../postgres/connect.js';
import { checkDistinctServers, findRoles, type NodeProbe, probeOn } from './roles.js';

/**
 * One client per configured server, connected before any work starts: a cluster command that cannot reach every
 * server fails with one SERVER_UNREACHABLE line and has changed nothing on the servers it could reach.
 */
export type ServerClients = Map<string, pg.Client>;

type ServerList = Pick<ClusterConfig, 'servers'> & Partial<Pick<ClusterConfig, 'nodes'>>;

/**
 * Every node URL of a server, in config order: its one URL, or a primary and its streaming replicas (SPEC F1).
 * Roles are found at run time. `nodes` is used only while its first URL is still `servers[name]`, so a config
 * copied with a server's URL replaced (`{ ...config, servers: { … } }`) does not reach the old nodes.
 */
export function serverNodeUrls(config: ServerList, name: string): string[] {
  const url = config.servers[name];
  if (url === undefined) throw new ShardflakeError('UNKNOWN_SERVER', `server ${name} is not in the config`);
  const nodes = config.nodes?.[name];
  return nodes && nodes[0] === url ? [...nodes] : [url];
}

/**
 * The URL of a server's primary node. A server of one URL is that URL; when it lists several nodes, every node is
 * asked `pg_is_in_recovery()` now (all must answer, exactly one may be the primary, all of one system), so after a
 * failover commands reach the new primary without a config change. Every command that writes to a server
 * connects through here or through `connectServer`, never to `config.servers[name]` directly.
 */
export async function primaryUrl(
  config: ServerList,
  name: string,
  options: { connectTimeoutMs?: number; requireAll?: boolean } = {},
): Promise<string> {
  const urls = serverNodeUrls(config, name);
  if (urls.length === 1) return urls[0] as string;
  return (await findRoles(name, urls, options.connectTimeoutMs, options.requireAll ?? true)).primary.url;
}

/** One client on a server's primary. Connection failures throw SERVER_UNREACHABLE, a refused login AUTH_FAILED. */
export async function connectServer(
  config: ServerList,
  name: string,
  options: { connectTimeoutMs?: number; applicationName?: string; requireAll?: boolean } = {},
): Promise<pg.Client> {
  try {
    return await connect(await primaryUrl(config, name, options), options);
  } catch (error) {
    throw onServer(name, error);
  }
}

/**
 * An error met on a server, its message starting with the server's name (`server b: …`) unless it does already;
 * an AUTH_FAILED keeps its class and fields, with the server's name in `server`.
 */
function onServer(name: string, error: unknown): unknown {
  if (!(error instanceof ShardflakeError) || error.message.startsWith(`server ${name}`)) return error;
  const message = `server ${name}: ${error.message}`;
  if (error instanceof AuthFailedError)
    return new AuthFailedError(message, { ...error, server: name, sqlState: error.sqlState, cause: error });
  return new ShardflakeError(error.code, message, {
    sqlState: error.sqlState,
    detail: error.detail,
    cause: error,
  });
}

/**
 * A client on every server's primary. Also refuses two configured servers that are one database (a replica of
 * server a listed as server b, or one URL under two names): their shards would be created twice.
 */
export async function connectAll(
  config: ServerList,
  options: { connectTimeoutMs?: number; applicationName?: string } = {},
): Promise<ServerClients> {
  const names = Object.keys(config.servers);
  const clients: ServerClients = new Map();
  const probes = new Map<string, NodeProbe[]>();
  const settled = await Promise.allSettled(
    names.map(async (name) => {
      const urls = serverNodeUrls(config, name);
      let nodes: NodeProbe[] | undefined;
      if (urls.length > 1) nodes = (await findRoles(name, urls, options.connectTimeoutMs)).nodes;
      const url = nodes ? (nodes.find((n) => n.role === 'primary') as NodeProbe).url : (urls[0] as string);
      const client = await connect(url, options);
      clients.set(name, client);
      probes.set(name, nodes ?? [await probeOn(client, url)]);
    }),
  );
  const failedAt = settled.findIndex((r) => r.status === 'rejected');
  try {
    if (failedAt !== -1) {
      // findRoles' messages already name their server
      throw onServer(names[failedAt] as string, (settled[failedAt] as PromiseRejectedResult).reason);
    }
    checkDistinctServers(new Map(names.map((n) => [n, probes.get(n) as NodeProbe[]])));
    for (const name of names) {
      const probed = probes.get(name) as NodeProbe[];
      const only = probed[0];
      if (probed.length === 1 && only?.role === 'replica') {
        throw new ShardflakeError(
          'NO_PRIMARY',
          `server ${name}: node ${only.node} is a replica (in recovery) and the server lists no primary`,
        );
      }
    }
  } catch (error) {
    await closeAll(clients);
    throw error;
  }
  return clients;
}

export async function closeAll(clients: ServerClients): Promise<void> {
  await Promise.all([...clients.values()].map((c) => c.end().catch(() => {})));
}

import type pg from 'pg';
import { ShardflakeError } from '../errors.js';
import { connect } from '../postgres/connect.js';
import type { ClusterConfig } from './config.js';

/**
 * One client per configured server, connected before any work starts: a cluster command that cannot reach every
 * server fails with one SERVER_UNREACHABLE line and has changed nothing on the servers it could reach.
 */
export type ServerClients = Map<string, pg.Client>;

/**
 * Every node URL of a server: today the one URL of `config.servers[name]`; a server may also list a primary and its
 * streaming replicas (SPEC F1), in which case all of them, in config order. Roles are found at run time.
 */
export function serverNodeUrls(config: Pick<ClusterConfig, 'servers'>, name: string): string[] {
  const url = config.servers[name];
  if (url === undefined) throw new ShardflakeError('UNKNOWN_SERVER', `server ${name} is not in the config`);
  return [url];
}

/**
 * The URL of a server's primary node. Today a server is one URL; when a server lists several nodes (a primary and
 * its streaming replicas), this is where the primary is found at run time. Every command that writes to a server
 * connects through here or through `connectServer`, never to `config.servers[name]` directly.
 */
export async function primaryUrl(config: Pick<ClusterConfig, 'servers'>, name: string): Promise<string> {
  const url = config.servers[name];
  if (url === undefined) throw new ShardflakeError('UNKNOWN_SERVER', `server ${name} is not in the config`);
  return url;
}

/** One client on a server's primary. Connection failures throw SERVER_UNREACHABLE. */
export async function connectServer(
  config: Pick<ClusterConfig, 'servers'>,
  name: string,
  options: { connectTimeoutMs?: number; applicationName?: string } = {},
): Promise<pg.Client> {
  return connect(await primaryUrl(config, name), options);
}

export async function connectAll(
  config: Pick<ClusterConfig, 'servers'>,
  options: { connectTimeoutMs?: number; applicationName?: string } = {},
): Promise<ServerClients> {
  const names = Object.keys(config.servers);
  const settled = await Promise.allSettled(names.map((name) => connectServer(config, name, options)));
  const clients: ServerClients = new Map();
  settled.forEach((r, i) => {
    if (r.status === 'fulfilled') clients.set(names[i] as string, r.value);
  });
  const failedAt = settled.findIndex((r) => r.status === 'rejected');
  if (failedAt !== -1) {
    await closeAll(clients);
    const reason = (settled[failedAt] as PromiseRejectedResult).reason;
    if (reason instanceof ShardflakeError) {
      throw new ShardflakeError(reason.code, `server ${names[failedAt]}: ${reason.message}`, {
        cause: reason,
      });
    }
    throw reason;
  }
  return clients;
}

export async function closeAll(clients: ServerClients): Promise<void> {
  await Promise.all([...clients.values()].map((c) => c.end().catch(() => {})));
}

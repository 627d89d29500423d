import type pg from 'pg';
import { ShardflakeError } from '../errors.js';
import { connect } from '../postgres/connect.js';
import type { ClusterConfig } from './config.js';

/**
 * One client per configured server, connected before any work starts: a cluster command that cannot reach every
 * server fails with one SERVER_UNREACHABLE line and has changed nothing on the servers it could reach.
 */
export type ServerClients = Map<string, pg.Client>;

export async function connectAll(
  config: Pick<ClusterConfig, 'servers'>,
  options: { connectTimeoutMs?: number; applicationName?: string } = {},
): Promise<ServerClients> {
  const names = Object.keys(config.servers);
  const settled = await Promise.allSettled(
    names.map((name) => connect(config.servers[name] as string, options)),
  );
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

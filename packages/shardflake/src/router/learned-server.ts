import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { PASSWORD_HINT } from '../postgres/connect.js';
import type { MapState } from '../routing/map.js';
import { serverNodeUrls } from '../topology/connections.js';
import { type LoginMemory, loginMemory } from '../topology/login-backoff.js';

type ServerList = Pick<ClusterConfig, 'servers'> & Partial<Pick<ClusterConfig, 'nodes'>>;

/**
 * The node URLs of a server, from the config, or, for a server the config lacks (added for a rebalance after this
 * router started), from the catalog's server list (catalog/servers.ts). Those addresses carry no password:
 * node-postgres takes it from PGPASSWORD or ~/.pgpass, as libpq does. A server neither knows is one line naming it.
 */
export function serverUrls(config: ServerList, state: MapState | undefined, server: string): string[] {
  if (server in config.servers) return serverNodeUrls(config, server);
  const known = state?.servers.get(server);
  if (!known || known.length === 0) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `the shard map places a shard on server ${server}, which neither this router's config nor the catalog's server list knows; add server ${server} to the config`,
    );
  }
  return [...known];
}

/**
 * The router's memory of a server's refused logins (topology/login-backoff.ts), with the hint for its AUTH_FAILED:
 * a configured server's password belongs in the config (or the environment); a learned one's, which the catalog
 * never keeps, in the environment, or the server belongs in the router's config.
 */
export function serverLoginMemory(config: ServerList, urls: readonly string[], server: string): LoginMemory {
  const hint =
    server in config.servers
      ? PASSWORD_HINT
      : `this router learned server ${server} from the catalog, which keeps no passwords: add server ${server} to the router's config with its password as \${VAR}, or give the password in PGPASSWORD or the pgpass file (docs/security.md)`;
  return loginMemory(server, { urls, hint });
}

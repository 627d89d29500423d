import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { describeUrl } from '../postgres/connect.js';
import type { MapState } from '../routing/map.js';
import { serverNodeUrls } from '../topology/connections.js';
import type { ServerNodes } from '../topology/nodes.js';

/**
 * The nodes of a server, from the config, or, for a server the config lacks (added for a rebalance after this
 * router started), from the catalog's server list (catalog/servers.ts). Those addresses carry no password:
 * node-postgres takes it from PGPASSWORD or ~/.pgpass, as libpq does. A server neither knows, or one the router
 * cannot log in to with what its environment gives, is one line naming the server and what to add.
 */
export function learnedServerNodes(
  config: Pick<ClusterConfig, 'servers'> & Partial<Pick<ClusterConfig, 'nodes'>>,
  state: MapState | undefined,
  server: string,
  create: (urls: string[]) => ServerNodes,
): ServerNodes {
  if (server in config.servers) return create(serverNodeUrls(config, server));
  const known = state?.servers.get(server);
  if (!known || known.length === 0) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `the shard map places a shard on server ${server}, which neither this router's config nor the catalog's server list knows; add server ${server} to the config`,
    );
  }
  const nodes = create(known);
  return {
    name: nodes.name,
    hasReplicas: nodes.hasReplicas,
    async acquire(options) {
      try {
        return await nodes.acquire(options);
      } catch (error) {
        throw loginFailure(error, server, known) ?? error;
      }
    },
    positionAfterWrite: (lease) => nodes.positionAfterWrite(lease),
    noteError: (node, error) => nodes.noteError(node, error),
    end: () => nodes.end(),
  };
}

/**
 * A refused login (SQLSTATE 28P01 or 28000, or node-postgres finding no password to answer SCRAM with) as one line
 * naming the server, its address and what to add; null for any other error.
 */
function loginFailure(error: unknown, server: string, urls: readonly string[]): ShardflakeError | null {
  const e = (error as { cause?: unknown }).cause ?? error;
  const code = (e as { code?: string }).code ?? (error as { sqlState?: string }).sqlState;
  const message = String((e as { message?: string }).message ?? '');
  const refused =
    code === '28P01' || code === '28000' || /client password must be a string|password/i.test(message);
  if (!refused) return null;
  return new ShardflakeError(
    'INVALID_CONFIG',
    `this router learned server ${server} (${urls.map(describeUrl).join(', ')}) from the catalog, which keeps no passwords, and cannot log in to it (${code === '28P01' ? 'password authentication failed' : 'no password given'}); give its password in PGPASSWORD or ~/.pgpass, or add server ${server} to the router's config`,
    { cause: error },
  );
}

import { installClusterIdentity, installTransactionLog } from '../catalog/transactions.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * What `cluster init` installs for cross-server transactions: the cluster's identity on the catalog and the
 * decision log on every server (any server may be a transaction's last agent). Routers also install the log on
 * demand (state.ts), for clusters made before it existed.
 */
export async function installTransactions(
  clients: ReadonlyMap<string, Queryable>,
  catalog: string,
): Promise<void> {
  const catalogClient = clients.get(catalog);
  if (catalogClient) await installClusterIdentity(catalogClient);
  for (const client of clients.values()) await installTransactionLog(client);
}

import type { ClusterConfig } from '../config/config.js';
import { closeAll, connectAll, connectServer } from '../topology/connections.js';
import { installReference } from './install.js';
import { hasReference, isCurrent, readReferenceState } from './state.js';

/**
 * The one call a shard move makes into reference tables, before it records anything: the target server must hold
 * a complete, current copy before a shard that joins against it lives there (SPEC G2). The common case (a server
 * that has had its copy since `cluster init`) costs one query on the target. Otherwise every server is connected
 * (filling a copy locks the reference tables of all of them, see copy.ts) and the target's copy is created or
 * migrated and filled from a synced server; the other servers are only read and locked, never changed.
 */
export async function ensureReferenceOn(config: ClusterConfig, server: string): Promise<void> {
  if (!hasReference(config)) return;
  const target = await connectServer(config, server, { applicationName: 'shardflake reference' });
  try {
    if (isCurrent(config, await readReferenceState(target))) return;
  } finally {
    await target.end().catch(() => {});
  }
  const clients = await connectAll(config, { applicationName: 'shardflake reference' });
  try {
    await installReference(config, clients, { only: [server] });
  } finally {
    await closeAll(clients);
  }
}

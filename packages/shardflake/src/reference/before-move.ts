import { readReferenceCopies } from '../catalog/reference-copies.js';
import type { ClusterConfig } from '../config/config.js';
import { closeAll, connectAll, connectServer } from '../topology/connections.js';
import { installReference } from './install.js';
import { recordCopies } from './servers.js';
import { hasReference, isCurrent, readReferenceState } from './state.js';

/**
 * The one call a shard move makes into reference tables, before it records anything: the target server must hold
 * a complete, current copy before a shard that joins against it lives there (SPEC G2), and the catalog must list
 * it, so that every router writes it (servers.ts). The common case (a server that has had its copy since `cluster
 * init`) costs one query on the target and one on the catalog. Otherwise every server is connected (filling a
 * copy holds the writers of all of them, see copy.ts) and the target's copy is created or migrated and filled from
 * a synced server; the other servers' tables and rows are only read and locked, never changed (their bookkeeping
 * is brought up to date, and learns of the new copy).
 */
export async function ensureReferenceOn(config: ClusterConfig, server: string): Promise<void> {
  if (!hasReference(config)) return;
  const target = await connectServer(config, server, { applicationName: 'shardflake reference' });
  try {
    const state = await readReferenceState(target);
    if (state && isCurrent(config, state)) {
      // Filled earlier (by a fill that stopped before the catalog heard of it, or by cluster migrate): recorded with
      // the copies it knows of, so that a first record does not leave out a copy on a server without shards.
      const catalog = await connectServer(config, config.catalog, {
        applicationName: 'shardflake reference',
      });
      try {
        if (!(await readReferenceCopies(catalog)).includes(server))
          await recordCopies(config, catalog, [...new Set([server, ...state.copies])]);
      } finally {
        await catalog.end().catch(() => {});
      }
      return;
    }
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

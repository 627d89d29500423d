import type pg from 'pg';
import { recordReferenceCopies } from '../catalog/reference-copies.js';
import { recordServers } from '../catalog/servers.js';
import type { ClusterConfig } from '../config/config.js';
import type { MapState } from '../routing/map.js';

/**
 * Which servers hold a copy of the reference tables: what `router.withReference` writes and where the catalog
 * learns it.
 *
 * A router writes the servers the catalog records as holding a synced copy (catalog/reference-copies.ts), plus every
 * server that holds a shard (a shard never moves to a server before its copy is filled, so that adds nothing but
 * safety), plus the copies its writes learned of from the servers themselves since (write.ts). Its own config
 * plays no part — a router started before a server was added writes that server's copy as soon as it exists —
 * except for a cluster whose catalog records no copy yet (made before copies were recorded, and not migrated
 * since): there, as before, the config's servers.
 */
export function referenceServersOf(
  state: MapState,
  configServers: readonly string[],
  learned: ReadonlySet<string>,
): string[] {
  const servers = new Set(state.referenceCopies.length > 0 ? state.referenceCopies : configServers);
  for (const placement of state.shards) if (placement) servers.add(placement.server);
  for (const server of learned) servers.add(server);
  return [...servers].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Records copies in the catalog, with their servers' addresses (no passwords), so that a router on an older config
 * that must write one can find it (router/learned-server.ts).
 */
export async function recordCopies(
  config: Pick<ClusterConfig, 'nodes'>,
  catalog: pg.Client,
  servers: readonly string[],
): Promise<void> {
  if (servers.length === 0) return;
  await recordServers(
    catalog,
    Object.fromEntries(servers.flatMap((s) => (config.nodes[s] ? [[s, config.nodes[s]]] : []))),
  );
  await recordReferenceCopies(catalog, servers);
}

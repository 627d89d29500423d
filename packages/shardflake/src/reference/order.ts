import type { ClusterConfig } from '../config/config.js';

/**
 * The one order in which every reference write, migration and copy reaches the servers: by server name. Whoever
 * locks reference tables takes the first server's locks before any other, so two of them that conflict meet (and
 * wait, or get a deadlock error from that one server) at the first server they share, instead of each holding one
 * server and waiting for the other: a wait across two servers is a deadlock no server can see.
 */
export function serverOrder(config: Pick<ClusterConfig, 'servers'>): string[] {
  return Object.keys(config.servers).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

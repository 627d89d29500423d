import type { Layout } from '../ids/layout.js';
import type { ClusterConfig } from './config.js';

/**
 * Where a config and the cluster its catalog describes disagree on what routing depends on: the number of logical
 * shards (keys are routed `mod logicalShards`), the id layout and its epoch (ids are read by them). A router that
 * silently used the catalog's values while the application believed the config's would route keys to other
 * shards than the application's other tools, and a config that silently lost would hide the mistake; so a router
 * refuses to start instead, and says which value differs, both sides, in one line.
 *
 * Only what the config gives is compared: a config of just `servers` and `catalog` takes the catalog's values.
 */
export function configDrift(
  config: Partial<Pick<ClusterConfig, 'logicalShards' | 'layout' | 'catalog'>>,
  cluster: { logicalShards: number; layout: Layout },
): string | undefined {
  const where = config.catalog === undefined ? 'the catalog' : `catalog server ${config.catalog}`;
  if (config.logicalShards !== undefined && config.logicalShards !== cluster.logicalShards)
    return `logicalShards is ${config.logicalShards} in the config but ${cluster.logicalShards} in the cluster (${where})`;
  if (config.layout !== undefined && config.layout.name !== cluster.layout.name)
    return `layout is ${config.layout.name} in the config but ${cluster.layout.name} in the cluster (${where})`;
  if (config.layout !== undefined && config.layout.epoch !== cluster.layout.epoch)
    return `epoch is ${new Date(config.layout.epoch).toISOString()} in the config but ${new Date(cluster.layout.epoch).toISOString()} in the cluster (${where})`;
  return undefined;
}

import type { Queryable } from '../postgres/connect.js';
import type { ClusterConfig } from './config.js';
import { historyReport } from './migrations.js';

/**
 * The `cluster verify` check of migrations (issue 22): the config's migrations against the history the cluster
 * keeps — missing, changed (checksum), reordered, renamed, other table templates — one problem per difference.
 *
 * Shaped for the verify command's list of checks (`{ name, run(config, servers) → problems }`, src/cluster/verify.ts
 * by the tx helper); until that list exists this module stands alone and registers nothing. `servers` maps each
 * configured server to a connection (a client or a pool); only the catalog's is used.
 */
export interface MigrationProblem {
  check: 'migrations';
  /** Where: the catalog server. */
  server: string;
  message: string;
}

export const migrationsCheck = {
  name: 'migrations' as const,
  async run(config: ClusterConfig, servers: ReadonlyMap<string, Queryable>): Promise<MigrationProblem[]> {
    const catalog = servers.get(config.catalog);
    if (!catalog) return [];
    const { differences } = await historyReport(catalog, config);
    return differences.map((d) => ({
      check: 'migrations' as const,
      server: config.catalog,
      message: `config and cluster migrations differ: ${d.text}`,
    }));
  },
};

import type { ClusterConfig } from '../config/config.js';
import type { Queryable } from '../postgres/connect.js';
import { historyReport } from './migrations.js';

/**
 * The `cluster verify` check of migrations (issue 22): the config's migrations against the history the cluster
 * keeps — missing, changed (checksum), reordered, renamed, other table templates — one problem per difference.
 *
 * One of verify.ts's checks (`VerifyCheck`: `{ name, run(config, pools) → Problem[] }`); it needs only
 * `pools.use(server, fn)`, restated here so that the check does not depend on the transactions module.
 */
export interface MigrationProblem {
  check: string;
  where: string;
  what: string;
}

/** What a check gets from verify: a connection to any configured server's primary, shared by every check. */
export interface VerifyServers {
  use<T>(server: string, fn: (client: Queryable) => Promise<T>): Promise<T>;
}

export const migrationsCheck = {
  name: 'migrations',
  async run(config: ClusterConfig, pools: VerifyServers): Promise<MigrationProblem[]> {
    const { differences } = await pools.use(config.catalog, (catalog) => historyReport(catalog, config));
    return differences.map((d) => ({
      check: 'migrations',
      where: d.version === 0 ? 'tables (version 0)' : `migration ${d.version}`,
      what: `config and cluster migrations differ: ${d.text}`,
    }));
  },
};

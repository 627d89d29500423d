import type { ClusterConfig } from '../config/config.js';
import type { Problem, VerifyCheck } from '../config/verify-check.js';
import type { ServerAccess } from '../postgres/connect.js';
import { clusterIdOf, twoPhaseCapability } from './cluster-access.js';
import { listInDoubt } from './recovery.js';
import { TRANSACTION_DEFAULTS } from './state.js';

/**
 * Cross-server transactions' part of `cluster verify`:
 * - in-doubt transactions: this cluster's prepared transactions older than the in-doubt grace (younger ones are
 *   commits in flight). Each holds its locks and holds back VACUUM on its server until settled.
 * - two-phase commit: servers with max_prepared_transactions = 0, whose shards cannot be in a transaction with
 *   shards of another server (only in a cluster of more than one server).
 */
const inDoubt: VerifyCheck = {
  name: 'in-doubt transactions',
  async run(config: ClusterConfig, pools: ServerAccess): Promise<Problem[]> {
    const id = await clusterIdOf(pools, config.catalog);
    if (id === null) return [];
    const { inDoubt: found, unreachable } = await listInDoubt(pools, id);
    const problems: Problem[] = unreachable.map((u) => ({
      check: this.name,
      where: `server ${u.server}`,
      what: `did not answer (${u.error.message}); its prepared transactions could not be listed`,
    }));
    for (const g of found) {
      if (g.ageMs < TRANSACTION_DEFAULTS.inDoubtAfterMs && g.decision === 'none') continue;
      const why =
        g.decision === 'commit'
          ? 'decided commit, not yet committed here'
          : g.decision === 'abort'
            ? 'decided abort, not yet rolled back here'
            : g.decision === 'none'
              ? 'no decision: its coordinator is gone'
              : g.decision === 'unreachable'
                ? `its decision server ${g.decisionServer} did not answer`
                : `its decision server ${g.decisionServer} is not in the config`;
      problems.push({
        check: this.name,
        where: `server ${g.server}, gid ${g.gid}`,
        what: `prepared ${Math.round(g.ageMs / 1000)} s ago, ${why}; run shardflake cluster recover`,
      });
    }
    return problems;
  },
};

const twoPhase: VerifyCheck = {
  name: 'two-phase commit',
  async run(_config: ClusterConfig, pools: ServerAccess): Promise<Problem[]> {
    if (pools.servers.length < 2) return [];
    return (await twoPhaseCapability(pools)).flatMap((c) => {
      if (c.maxPreparedTransactions === null)
        return [
          { check: this.name, where: `server ${c.server}`, what: `did not answer (${c.error?.message})` },
        ];
      if (c.maxPreparedTransactions > 0) return [];
      return [
        {
          check: this.name,
          where: `server ${c.server}`,
          what: 'max_prepared_transactions = 0: its shards cannot take part in transactions across servers; set it (e.g. to max_connections) and restart the server',
        },
      ];
    });
  },
};

export const transactionChecks: VerifyCheck[] = [inDoubt, twoPhase];

import type { ClusterConfig } from '../config/config.js';
import type { Problem, VerifyCheck } from '../config/verify-check.js';
import { ShardflakeError } from '../errors/errors.js';
import { lookupCheck } from '../lookups/verify.js';
import { clusterAccess } from '../recovery/cluster-access.js';
import { transactionChecks } from '../recovery/verify.js';
import { referenceCheck } from '../reference/verify.js';
import { idsCheck } from './ids-verify.js';
import { migrationsCheck } from './migrations-verify.js';

/**
 * `shardflake cluster verify`: the cluster's consistency checks, one list that each feature appends its own to
 * (one line below per module: transactions, reference tables, lookups, …). A check reads, never changes anything,
 * and names what is wrong and where; a check that cannot run (a server down) reports that as its problem.
 */
export type { Problem, VerifyCheck };

/** Every check, in the order they run and print. */
export const VERIFY_CHECKS: VerifyCheck[] = [
  ...transactionChecks,
  referenceCheck,
  lookupCheck,
  migrationsCheck,
  idsCheck,
];

export interface VerifyReport {
  ok: boolean;
  checks: { name: string; problems: number; ms: number }[];
  problems: Problem[];
}

export async function verifyCluster(
  config: ClusterConfig,
  options: { checks?: readonly VerifyCheck[] } = {},
): Promise<VerifyReport> {
  const pools = clusterAccess(config, 'shardflake verify');
  const report: VerifyReport = { ok: true, checks: [], problems: [] };
  try {
    for (const check of options.checks ?? VERIFY_CHECKS) {
      const started = performance.now();
      let problems: Problem[];
      try {
        problems = await check.run(config, pools);
      } catch (error) {
        const message = error instanceof ShardflakeError ? error.message : String(error);
        problems = [{ check: check.name, where: 'cluster', what: `the check could not run: ${message}` }];
      }
      report.checks.push({
        name: check.name,
        problems: problems.length,
        ms: Math.round(performance.now() - started),
      });
      report.problems.push(...problems);
    }
  } finally {
    await pools.close();
  }
  report.ok = report.problems.length === 0;
  return report;
}

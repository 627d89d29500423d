import type { Command } from 'commander';
import { VERIFY_CHECKS, type VerifyReport, verifyCluster } from 'shardflake/internal/admin/verify.js';
import { adoptionCheck } from 'shardflake/internal/adopt/verify-check.js';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { repairLookups } from 'shardflake/internal/lookups/verify.js';
import { leftoversCheck } from 'shardflake/internal/move/leftovers-check.js';
import { toJson } from './output.js';

/**
 * `shardflake cluster verify`: runs every consistency check (src/admin/verify.ts) and prints each problem with
 * where it is. Exit 0 when nothing is wrong, 1 when something is (a one-line count on stderr), like a test run.
 */
export function registerVerifyCommand(cluster: Command): void {
  cluster
    .command('verify')
    .description(
      'check the cluster for what must not be: in-doubt transactions, servers that cannot take part in them, lookup entries without rows or rows without entries, leftover copies of moved shards that are not fenced or took writes after their fence, …',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option('--json', 'print the report as JSON')
    .option(
      '--repair',
      'first repair what can be repaired (lookups: missing, stale or misplaced entries), then verify',
    )
    .action(async (flags: { config: string; json?: boolean; repair?: boolean }) => {
      const config = await loadConfig(flags.config);
      if (flags.repair) {
        const repaired = await repairLookups(config);
        if (!flags.json)
          process.stdout.write(
            repaired
              .map(
                (p) =>
                  `${p.repaired ? 'repaired' : 'NOT repaired'}  ${p.message}${p.unrepairable ? `: ${p.unrepairable}` : ''}\n`,
              )
              .join(''),
          );
      }
      const report = await verifyCluster(config, {
        checks: [...VERIFY_CHECKS, leftoversCheck, adoptionCheck],
      });
      process.stdout.write(flags.json ? `${toJson(report)}\n` : formatVerify(report));
      if (!report.ok) {
        process.stderr.write(
          `shardflake: cluster verify found ${report.problems.length} problem${report.problems.length === 1 ? '' : 's'}\n`,
        );
        process.exitCode = 1;
      }
    });
}

export function formatVerify(report: VerifyReport): string {
  const lines = report.checks.map((c) => {
    const mine = report.problems.filter((p) => p.check === c.name);
    return [
      `${mine.length === 0 ? 'ok  ' : 'FAIL'}  ${c.name} (${c.ms} ms)`,
      ...mine.map((p) => `      ${p.where}: ${p.what}`),
    ].join('\n');
  });
  return `${lines.join('\n')}\n`;
}

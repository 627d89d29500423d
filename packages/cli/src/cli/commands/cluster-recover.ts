import type { Command } from 'commander';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { recoverCluster } from 'shardflake/internal/recovery/cluster-access.js';
import type { RecoveryReport } from 'shardflake/internal/recovery/recovery.js';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

/**
 * `shardflake cluster recover`: settles the cluster's in-doubt transactions now (every router also does it by
 * itself) and prints each one it committed or rolled back. Exits ≠ 0 when a server did not answer, since the
 * transactions prepared there (or decided there) are still in doubt.
 */
export function registerRecoverCommand(cluster: Command): void {
  cluster
    .command('recover')
    .description(
      'commit or roll back in-doubt transactions across servers (by their recorded decision) and print what was done',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option('--json', 'print the result as JSON')
    .option(
      '--in-doubt-after <ms>',
      'roll back a prepared transaction without a decision once it is this old (default 5000)',
      positiveInteger('--in-doubt-after', 0),
    )
    .action(async (flags: { config: string; json?: boolean; inDoubtAfter?: number }) => {
      const config = await loadConfig(flags.config);
      const report = await recoverCluster(config, { inDoubtAfterMs: flags.inDoubtAfter });
      process.stdout.write(flags.json ? `${toJson(report)}\n` : formatRecovery(report));
      const down = report.unreachable[0];
      if (down)
        throw new ShardflakeError(
          'SERVER_UNREACHABLE',
          `server ${down.server} did not answer (${down.error.message}); its in-doubt transactions are not settled yet, run recover again`,
        );
    });
}

export function formatRecovery(report: RecoveryReport): string {
  const lines = [
    `cluster recover: committed ${report.committed.length}, rolled back ${report.rolledBack.length}, still in doubt ${report.waiting.length}`,
    ...report.committed.map((g) => `  committed    ${g.gid}  on ${g.server}`),
    ...report.rolledBack.map((g) => `  rolled back  ${g.gid}  on ${g.server}`),
    ...report.waiting.map(
      (g) =>
        `  in doubt     ${g.gid}  on ${g.server}: ${
          g.decision === 'none'
            ? `no decision yet, ${(g.ageMs / 1000).toFixed(1)} s old (its coordinator may still be committing)`
            : g.decision === 'unreachable'
              ? `decision server ${g.decisionServer} did not answer`
              : g.decision === 'unknown-server'
                ? `decision server ${g.decisionServer} is not in the config`
                : `${g.decision} decided, being settled by another recoverer`
        }`,
    ),
    '',
  ];
  return lines.join('\n');
}

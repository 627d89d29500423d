import type { Command } from 'commander';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { migrateCluster } from 'shardflake/internal/admin/migrate.js';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { checkPrivileges } from 'shardflake/internal/fence/privileges.js';
import { describeUrl } from 'shardflake/internal/postgres/connect.js';
import type { ReferenceInstallResult } from 'shardflake/internal/reference/install.js';
import { registerAdoptCommands } from './cluster-adopt.js';
import { registerBackupCommands } from './cluster-backups.js';
import { registerDashboardCommand } from './cluster-dashboard.js';
import { registerMoveCommands } from './cluster-move.js';
import { registerRecoverCommand } from './cluster-recover.js';
import { registerSqlQueryCommand } from './cluster-sql.js';
import { registerStatusCommand } from './cluster-status.js';
import { registerVerifyCommand } from './cluster-verify.js';
import { positiveInteger, shareOption } from './options.js';
// Kept for commands that imported them from here; new code imports src/cli/commands/output.ts (a command module
// importing cluster.ts would run in a circle with it, as cluster-move.ts once did).
import { progressBar, toJson } from './output.js';

export { progressBar, toJson };

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

interface Flags {
  config: string;
  json?: boolean;
}

export function registerClusterCommands(program: Command): void {
  const cluster = program
    .command('cluster')
    .description('a cluster of logical shards (one schema each) on several PostgreSQL servers');

  cluster
    .command('init')
    .description(
      'create the catalog and every logical shard (schema, id generator, tables); rerun to finish a killed run',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option('--json', 'print the result as JSON')
    .option('--batch-size <n>', 'shards per transaction', positiveInteger('--batch-size'))
    .option('--connections <n>', 'parallel connections per server', positiveInteger('--connections'))
    .action(async (flags: Flags & { batchSize?: number; connections?: number }) => {
      const config = await loadConfig(flags.config);
      await checkPrivileges(config, 'init');
      const bar = progressBar('init   ', !flags.json);
      const result = await initCluster(config, {
        batchSize: flags.batchSize,
        connectionsPerServer: flags.connections,
        onProgress: (done, total) => bar.update(done, total),
      }).finally(() => bar.stop());
      if (flags.json) {
        process.stdout.write(`${toJson(result)}\n`);
        return;
      }
      const servers = Object.keys(config.servers);
      process.stdout.write(
        [
          `cluster init: ${result.logicalShards} logical shards on ${servers.length} servers in ${seconds(result.durationMs)} (map version ${result.mapVersion})`,
          `  created ${result.created}, already there ${result.alreadyRecorded}, recovered from a killed run ${result.recovered}`,
          ...servers.map(
            (n) =>
              `  ${n.padEnd(8)} ${String(result.perServer[n] ?? 0).padStart(5)} shards  ${describeUrl(config.servers[n] as string)}`,
          ),
          '',
        ].join('\n'),
      );
    });

  registerStatusCommand(cluster);
  registerRecoverCommand(cluster);
  registerVerifyCommand(cluster);
  registerAdoptCommands(cluster);

  cluster
    .command('migrate')
    .description(
      "apply the config's migrations to every logical shard, one transaction per shard (index builds CONCURRENTLY outside one); resumable",
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option('--json', 'print the result as JSON')
    .option('--connections <n>', 'parallel connections per server', positiveInteger('--connections'))
    .option(
      '--parallel-builds <n>',
      'servers building indexes CONCURRENTLY at once, one build each (default: all)',
      positiveInteger('--parallel-builds'),
    )
    .option(
      '--build-share <share>',
      "the share of each server's time its index builds may take, e.g. 0.5: after each build the server rests as long (default 1)",
      shareOption('--build-share'),
    )
    .action(async (flags: Flags & { connections?: number; parallelBuilds?: number; buildShare?: number }) => {
      const config = await loadConfig(flags.config);
      await checkPrivileges(config, 'migrate');
      const bar = progressBar('migrate', !flags.json);
      const result = await migrateCluster(config, {
        connectionsPerServer: flags.connections,
        parallelBuilds: flags.parallelBuilds,
        buildShare: flags.buildShare,
        onProgress: (done, total) => bar.update(done, total),
        onLookupProgress: (_lookup, done, total) => bar.update(done, total),
      }).finally(() => bar.stop());
      if (flags.json) process.stdout.write(`${toJson(result)}\n`);
      else {
        process.stdout.write(
          [
            `cluster migrate: target v${result.target}; migrated ${result.migrated}, already current ${result.alreadyCurrent}, failed ${result.failed.length} (${seconds(result.durationMs)})`,
            ...result.differences.map((d) => `warning: config and cluster migrations differ: ${d}`),
            ...referenceLines(result.reference),
            ...result.rebuiltIndexes.map(
              (r) => `  shard ${r.shard}: index ${r.index} was left invalid by an earlier build; rebuilt`,
            ),
            ...result.failed.map(
              (f) => `  shard ${f.shard} (${f.schema} on ${f.server}) stays at v${f.version}: ${f.error}`,
            ),
            ...result.lookups
              .filter((l) => !l.alreadyBuilt)
              .map(
                (l) => `  lookup ${l.lookup} built: ${l.entriesWritten} entries (${seconds(l.durationMs)})`,
              ),
            ...result.lookups
              .filter((l) => l.alreadyBuilt && l.ownerIndexBuilt)
              .map(
                (l) => `  lookup ${l.lookup}: owner index built in every shard (${seconds(l.durationMs)})`,
              ),
            '',
          ].join('\n'),
        );
      }
      if (result.failed.length > 0) {
        throw new ShardflakeError(
          'MIGRATION_FAILED',
          `${result.failed.length} shards failed and stay at their old version (first: shard ${result.failed[0]?.shard}: ${result.failed[0]?.error})`,
        );
      }
    });

  registerMoveCommands(cluster);
  registerDashboardCommand(cluster);
  registerSqlQueryCommand(cluster);
  registerBackupCommands(cluster);
}

/** What migrate did to the reference tables, when it did anything. */
function referenceLines(r: ReferenceInstallResult): string[] {
  return [
    ...(r.changed.length > 0 ? [`  reference tables: created or migrated on ${r.changed.join(', ')}`] : []),
    ...r.filled.map(
      (f) => `  reference tables: filled server ${f.server} from server ${f.from} (${f.rows} rows)`,
    ),
  ];
}

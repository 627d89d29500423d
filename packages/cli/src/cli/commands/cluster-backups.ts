import type { Command } from 'commander';
import {
  createRestorePoint,
  RESTORE_POINT_DEFAULTS,
  type RestorePoint,
} from 'shardflake/internal/backups/restore-point.js';
import { type RestoredShard, restoreShard } from 'shardflake/internal/backups/restore-shard.js';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

/**
 * `shardflake cluster restore-point` and `cluster restore-shard` (docs/backups.md): thin over the library's
 * backups/ folder.
 */
export function registerBackupCommands(cluster: Command): void {
  cluster
    .command('restore-point')
    .description(
      "write a named restore point on every server's primary at one logical moment (cross-server commits and move switches held off while it is written), and record it in the catalog",
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .requiredOption('--name <name>', "the restore point's name (letters, digits, . _ : -; never reused)")
    .option(
      '--lock-timeout <ms>',
      `how long each attempt waits for commits already deciding (default ${RESTORE_POINT_DEFAULTS.lockTimeoutMs})`,
      positiveInteger('--lock-timeout'),
    )
    .option(
      '--attempts <n>',
      `attempts before giving up (default ${RESTORE_POINT_DEFAULTS.attempts})`,
      positiveInteger('--attempts'),
    )
    .option('--json', 'print the result as JSON')
    .action(
      async (flags: {
        config: string;
        name: string;
        lockTimeout?: number;
        attempts?: number;
        json?: boolean;
      }) => {
        const config = await loadConfig(flags.config);
        const point = await createRestorePoint(config, flags.name, {
          lockTimeoutMs: flags.lockTimeout,
          attempts: flags.attempts,
        });
        process.stdout.write(flags.json ? `${toJson(point)}\n` : formatRestorePoint(point));
      },
    );

  cluster
    .command('restore-shard')
    .description(
      "copy one shard's tables from a server restored beside the cluster into a side schema on the shard's live home, and verify them (counts and checksums)",
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .requiredOption('--shard <n>', 'the logical shard', positiveInteger('--shard', 0))
    .requiredOption('--from <url>', 'the restored server (password from the environment or ~/.pgpass)')
    .option('--into <schema>', 'the side schema to create on the live home (default <shard schema>_restored)')
    .option('--json', 'print the result as JSON')
    .action(async (flags: { config: string; shard: number; from: string; into?: string; json?: boolean }) => {
      const config = await loadConfig(flags.config);
      const restored = await restoreShard(config, flags.shard, flags.from, { into: flags.into });
      process.stdout.write(flags.json ? `${toJson(restored)}\n` : formatRestoredShard(restored));
    });
}

export function formatRestorePoint(point: RestorePoint): string {
  const width = Math.max(...point.servers.map((s) => s.server.length));
  return [
    `cluster restore-point: ${point.name} taken ${point.takenAt} on ${point.servers.length} servers; cross-server commits held off ${point.heldMs} ms (${point.attempts} attempt${point.attempts === 1 ? '' : 's'})`,
    ...point.servers.map((s) => `  ${s.server.padEnd(width)}  ${s.lsn}`),
    `restore every server to it with recovery_target_name = '${point.name}', then run cluster recover (docs/backups.md)`,
    ...point.warnings.map((w) => `warning: ${w}`),
    '',
  ].join('\n');
}

export function formatRestoredShard(r: RestoredShard): string {
  const width = Math.max(...r.tables.map((t) => t.table.length));
  return [
    `cluster restore-shard: shard ${r.shard} (${r.schema}) from ${r.from} into schema ${r.into} on server ${r.server}; verified, counts and checksums equal (${r.ms} ms)`,
    ...r.tables.map((t) => `  ${t.table.padEnd(width)}  ${t.rows} rows`),
    '',
  ].join('\n');
}

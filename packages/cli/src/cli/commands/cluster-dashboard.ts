import type { Command } from 'commander';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { checkPrivileges } from 'shardflake/internal/fence/privileges.js';
import { serveDashboard } from '../../dashboard/server.js';

/** The port `cluster dashboard` listens on when --port is not given. */
export const DEFAULT_DASHBOARD_PORT = 5480;

function portOption(value: string): number {
  const n = /^[0-9]+$/.test(value.trim()) ? Number(value) : Number.NaN;
  if (!(Number.isInteger(n) && n >= 0 && n <= 65_535)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--port must be a whole number from 0 to 65535 (0: a free one), not ${JSON.stringify(value)}`,
    );
  }
  return n;
}

/** `shardflake cluster dashboard --config FILE [--port N]`: serves the dashboard until Ctrl-C (or SIGTERM). */
export function registerDashboardCommand(cluster: Command): void {
  cluster
    .command('dashboard')
    .description(
      'a live web page of the cluster on 127.0.0.1: shard map, servers, moves; /api/status as JSON',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option(
      '--port <n>',
      `port on 127.0.0.1, 0 for a free one (default ${DEFAULT_DASHBOARD_PORT})`,
      portOption,
    )
    .action(async (flags: { config: string; port?: number }) => {
      const config = await loadConfig(flags.config);
      await checkPrivileges(config, 'dashboard', { servers: [] });
      // The token comes from the environment, not a flag: a command line is visible to every local user (ps).
      const token = process.env.SHARDFLAKE_DASHBOARD_TOKEN || undefined;
      const dashboard = await serveDashboard(config, { port: flags.port ?? DEFAULT_DASHBOARD_PORT, token });
      const how = token ? ' (open it with ?token=… from SHARDFLAKE_DASHBOARD_TOKEN once)' : '';
      process.stdout.write(`dashboard: ${dashboard.url}${how} (Ctrl-C stops it)\n`);
      const signal = await new Promise<NodeJS.Signals>((resolve) => {
        const stop = (received: NodeJS.Signals) => {
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
          resolve(received);
        };
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      });
      await dashboard.close();
      // As a shell reports a process stopped by that signal (128 + its number), so scripts can tell.
      process.exitCode = signal === 'SIGINT' ? 130 : 143;
    });
}

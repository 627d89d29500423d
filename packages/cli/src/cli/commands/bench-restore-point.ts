import type { Command } from 'commander';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { benchRestorePoint, type KindResult } from '../../bench/restore-point.js';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

/** `shardflake bench restore-point`: the pause a restore point costs cross-server commits (docs/benchmarks.md). */
export function registerBenchRestorePointCommand(bench: Command): void {
  bench
    .command('restore-point')
    .description(
      'the pause a restore point costs: bench cross-style transfers running on 2 and 4 servers, the longest delay a cross-server commit saw while restore points were taken (target ≤ 100 ms), and same-server commits alongside',
    )
    .option('--servers <list>', 'server counts, one cluster each (default 2,4)', serverCounts, [2, 4])
    .option('--rounds <n>', 'restore points per cluster', positiveInteger('--rounds'), 20)
    .option('--interval-ms <n>', 'milliseconds between restore points', positiveInteger('--interval-ms'), 300)
    .option('--clients <n>', 'cross-server transfer workers', positiveInteger('--clients'), 4)
    .option('--local-clients <n>', 'same-server transfer workers', positiveInteger('--local-clients', 0), 2)
    .option('--accounts <n>', 'accounts per shard', positiveInteger('--accounts'), 1000)
    .option('--json', 'print the result as JSON')
    .action(
      async (flags: {
        servers: number[];
        rounds: number;
        intervalMs: number;
        clients: number;
        localClients: number;
        accounts: number;
        json?: boolean;
      }) => {
        const result = await benchRestorePoint({
          ...flags,
          onProgress: flags.json || !process.stderr.isTTY ? undefined : (m) => process.stderr.write(`${m}\n`),
        });
        if (flags.json) {
          process.stdout.write(`${toJson(result)}\n`);
          return;
        }
        const ms = (v: number) => `${v.toFixed(1)} ms`;
        const kind = (name: string, k: KindResult) =>
          `  ${name.padEnd(12)} baseline ${String(k.baseline.count).padStart(6)} (p50 ${ms(k.baseline.p50)}, p99 ${ms(k.baseline.p99)}, max ${ms(k.baseline.max)})   during ${String(k.during.count).padStart(5)} (p50 ${ms(k.during.p50)}, p99 ${ms(k.during.p99)}, max ${ms(k.during.max)})`;
        const lines = [
          `bench restore-point: ${result.rounds} restore points per cluster, one every ${result.intervalMs} ms; ${result.clients} cross-server and ${result.localClients} same-server transfer workers, ${result.accounts} accounts per shard, fsync on`,
        ];
        for (const s of result.sizes) {
          lines.push(
            `${s.servers} servers: held ${ms(s.heldMs.p50)} p50, ${ms(s.heldMs.max)} max (library's measure); ${s.retried} of ${s.restorePoints} needed a second attempt`,
            kind('cross', s.cross),
            kind('same-server', s.local),
            `  longest delay of a cross-server commit during a restore point: ${ms(s.cross.longestDelayDuring)} (outside, the machine's own noise: ${ms(s.cross.longestDelayBaseline)}; excess ${ms(s.cross.longestDelayDuring - s.cross.longestDelayBaseline)}), target ≤ 100 ms: ${s.cross.longestDelayDuring <= 100 ? 'met' : 'MISSED'}`,
            `  same-server commits: p50 ${ms(s.local.during.p50)} during vs ${ms(s.local.baseline.p50)} outside, longest delay ${ms(s.local.longestDelayDuring)} (outside: ${ms(s.local.longestDelayBaseline)})`,
          );
        }
        process.stdout.write(`${lines.join('\n')}\n`);
      },
    );
}

/** `--servers 2,4`: whole numbers ≥ 2 (a restore point of one server holds nothing off). */
function serverCounts(value: string): number[] {
  const counts = value.split(',').map((v) => (/^\d+$/.test(v.trim()) ? Number(v) : Number.NaN));
  if (counts.length === 0 || counts.some((n) => !(Number.isSafeInteger(n) && n >= 2 && n <= 26)))
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--servers must be a list of server counts from 2 to 26 such as 2,4, not ${JSON.stringify(value)}`,
    );
  return counts;
}

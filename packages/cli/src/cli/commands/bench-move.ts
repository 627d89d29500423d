import type { Command } from 'commander';
import { registerBenchRebalanceCommand } from './bench-rebalance.js';
import { positiveInteger } from './options.js';
import { progressBar, toJson } from './output.js';
import { writeBenchReport } from './report-option.js';

/** `shardflake bench move`: copy speed and the longest write pause of an online shard move. */
export function registerBenchMoveCommand(bench: Command): void {
  registerBenchRebalanceCommand(bench);
  bench
    .command('move')
    .description(
      "move a shard of N rows between two embedded servers while a router writer inserts: copy rows/s and the longest write pause vs the same writer's normal latency",
    )
    .option('--rows <n>', 'rows in the moved shard', positiveInteger('--rows'), 200_000)
    .option('--json', 'print the results as JSON')
    .option('--report <file>', 'also write a self-contained HTML report')
    .action(async (flags: { rows: number; json?: boolean; report?: string }) => {
      // Loaded on use: the benchmark's dependencies load only when it runs.
      const { runMoveBench, moveSection } = await import('../../bench/move.js');
      const bar = progressBar('copy   ', !flags.json);
      const r = await runMoveBench({
        rows: flags.rows,
        onProgress: (_p, done, total) => bar.update(done, total),
      }).finally(() => bar.stop());
      if (flags.report) await writeBenchReport(flags.report, 'shardflake bench move', [moveSection(r)]);
      if (flags.json) {
        process.stdout.write(`${toJson(r)}\n`);
        return;
      }
      const ok = (b: boolean) => (b ? 'meets' : 'MISSES');
      const lines = [
        `shard moves of ${r.rows.toLocaleString('en-US')} rows (2 embedded PostgreSQL servers, ${r.machine.cpus} CPUs, Node ${r.machine.node})`,
      ];
      for (const run of r.runs) {
        const m = run.move;
        lines.push(
          `verify ${run.verify}:`,
          `  initial copy      ${run.copy.rowsPerSecond.toLocaleString('en-US')} rows/s in ${run.copy.ms} ms (${ok(run.copy.meetsTarget)} target ≥ ${run.copy.targetRowsPerSecond.toLocaleString('en-US')}); then indexes + catch-up ${Math.round(m.indexAndCatchUpMs ?? 0)} ms`,
          `  longest write     ${run.pause.longestWriteMs} ms seen by the router writer during the move (${ok(run.pause.meetsTarget)} target ≤ ${run.pause.targetMs} ms)`,
          `  normal write      p50 ${run.writer.normal.p50Ms} ms, p99 ${run.writer.normal.p99Ms} ms, max ${run.writer.normal.maxMs} ms (${run.writer.normal.inserts} inserts before the move)`,
          `  during the move   p50 ${run.writer.duringMove.p50Ms} ms, p99 ${run.writer.duringMove.p99Ms} ms (${run.writer.duringMove.inserts} inserts); longest = ${run.writer.ratioLongestToNormalP50}× normal p50`,
          `  cutover (lock → catalog switch) ${run.pause.moveReportedMs} ms: ${Object.entries(run.pause.steps)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')}`,
        );
        if (m.snapshotPauseMs !== null) {
          lines.push(
            `  snapshot check    pause ${m.snapshotPauseMs.toFixed(1)} ms to pin both copies, then checksums compared in ${Math.round(m.snapshotCompareMs ?? 0)} ms while writes went on`,
          );
        }
      }
      process.stdout.write(`${lines.join('\n')}\n`);
    });
}

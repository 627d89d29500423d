import type { Command } from 'commander';
import { positiveInteger } from './options.js';
import { phasedProgress, toJson } from './output.js';
import { writeBenchReport } from './report-option.js';

/** `shardflake bench cluster`: init time for thousands of shards, router vs direct inserts, feed latency. */
export function registerBenchClusterCommand(bench: Command): void {
  bench
    .command('cluster')
    .description(
      'cluster init time, router insert throughput vs direct pg (same run), cross-shard feed latency',
    )
    .option('--json', 'print the results as JSON')
    .option('--shards <n>', 'logical shards to create', positiveInteger('--shards'), 8192)
    .option('--rows <n>', 'rows per insert round', positiveInteger('--rows'), 3000)
    .option('--rounds <n>', 'insert rounds per side', positiveInteger('--rounds'), 6)
    .option('--report <file>', 'also write a self-contained HTML report')
    .action(
      async (flags: { json?: boolean; shards: number; rows: number; rounds: number; report?: string }) => {
        // Loaded on use: the benchmark's dependencies load only when it runs.
        const { runClusterBench } = await import('../../bench/cluster.js');
        const progress = phasedProgress(7, !flags.json);
        const result = await runClusterBench({
          initShards: flags.shards,
          rows: flags.rows,
          rounds: flags.rounds,
          onProgress: progress.update,
        }).finally(progress.stop);
        if (flags.report) {
          await writeBenchReport(flags.report, 'shardflake bench cluster', [
            {
              title: 'Cluster (bench cluster)',
              description:
                'Init time, router vs direct pg inserts in alternating rounds, cross-shard feed latency.',
              result,
              bars: {
                title: 'single-row inserts',
                unit: 'rows/s',
                values: [
                  { label: 'router', value: result.inserts.routerMedian },
                  { label: 'direct pg', value: result.inserts.directMedian },
                ],
              },
            },
          ]);
        }
        if (flags.json) {
          process.stdout.write(`${toJson(result)}\n`);
          return;
        }
        const { init, inserts, feed } = result;
        process.stdout.write(
          [
            `cluster init: ${init.logicalShards} logical shards on ${init.servers} servers in ${init.seconds.toFixed(1)} s (${Math.round(init.shardsPerSecond)} shards/s, ${init.batchSize} per transaction)`,
            `inserts (${inserts.rows} rows × ${inserts.rounds} rounds, ${inserts.concurrency} in flight):`,
            `  router     ${String(inserts.routerMedian).padStart(7)} rows/s  (rounds: ${inserts.routerPerSecond.join(', ')})`,
            `  direct pg  ${String(inserts.directMedian).padStart(7)} rows/s  (rounds: ${inserts.directPerSecond.join(', ')})`,
            `  router / direct = ${inserts.ratio.toFixed(3)}`,
            `feed: latest ${feed.limit} photos of ${feed.users} users on ${feed.shardsTouched} shards: p50 ${feed.p50Ms} ms, p99 ${feed.p99Ms} ms (${feed.runs} runs)`,
            `machine: ${result.machine.cpus} CPUs, Node ${result.machine.node}`,
            '',
          ].join('\n'),
        );
      },
    );
}

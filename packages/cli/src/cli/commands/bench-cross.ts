import type { Command } from 'commander';
import { benchCross, type SideResult } from '../../bench/cross.js';
import { type ReferenceBenchResult, runReferenceBench } from '../../bench/reference.js';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

export function registerBenchCrossCommand(bench: Command): void {
  bench
    .command('cross')
    .description(
      'transfers across shards: withShards on one server and across two (two-phase commit) vs the same updates in one local transaction; (c) a reference-table write on 1, 2 and 4 servers',
    )
    .option('--rounds <n>', 'rounds (sides alternate in each)', positiveInteger('--rounds'), 10)
    .option('--slice-ms <n>', 'milliseconds per side per round', positiveInteger('--slice-ms'), 1000)
    .option('--clients <n>', 'concurrent clients', positiveInteger('--clients'), 4)
    .option('--accounts <n>', 'accounts per shard', positiveInteger('--accounts'), 1000)
    .option('--no-fsync', 'run the servers with fsync off (what the round trips alone cost)')
    .option('--no-reference', 'skip (c), the reference-table write on 1, 2 and 4 servers')
    .option(
      '--reference-writes <n>',
      '(c): writes per side per round',
      positiveInteger('--reference-writes'),
      400,
    )
    .option('--json', 'print the result as JSON')
    .action(
      async (flags: {
        rounds: number;
        sliceMs: number;
        clients: number;
        accounts: number;
        fsync: boolean;
        reference: boolean;
        referenceWrites: number;
        json?: boolean;
      }) => {
        const result = await benchCross({
          ...flags,
          onProgress: flags.json || !process.stderr.isTTY ? undefined : (m) => process.stderr.write(`${m}\n`),
        });
        const reference = flags.reference
          ? await runReferenceBench({ writes: flags.referenceWrites, fsync: flags.fsync })
          : null;
        if (flags.json) {
          process.stdout.write(`${toJson({ ...result, reference })}\n`);
          return;
        }
        const ms = (v: number) => `${v.toFixed(2)} ms`;
        const row = (name: string, s: SideResult) =>
          `  ${name.padEnd(44)} cold ${String(Math.round(s.cold)).padStart(6)}/s (p50 ${ms(s.coldP50)}, p99 ${ms(s.coldP99)})   warm ${String(Math.round(median(s.warm))).padStart(6)}/s (p50 ${ms(s.p50)}, p99 ${ms(s.p99)})`;
        const ratio = (r: typeof result.ratioOneServer, target: number) =>
          `${r.ratio.toFixed(3)}× (rounds ${r.min.toFixed(3)}–${r.max.toFixed(3)}; cold ${r.cold.toFixed(3)}×), target ≥ ${target}: ${r.ratio >= target ? 'met' : 'MISSED'}`;
        process.stdout.write(
          [
            `bench cross: 2 embedded servers, fsync ${result.fsync ? 'on' : 'off'}, synchronous_commit ${result.synchronousCommit}; ${result.clients} clients, ${result.accounts} accounts per shard; plain parameterised statements`,
            `  ${result.rounds} rounds × ${result.sliceMs} ms per side (warm), cold = the first transfers on a new router`,
            row('baseline: one withShard, both updates', result.baseline),
            row('(a) withShards, 2 shards on one server', result.oneServer),
            row('(b) withShards, 2 servers (two-phase commit)', result.twoServers),
            `(a) one server vs one local transaction: ${ratio(result.ratioOneServer, 0.9)}`,
            `(b) two servers vs one local transaction: ${ratio(result.ratioTwoServers, 0.4)}`,
            ...(reference ? referenceLines(reference) : []),
            '',
          ].join('\n'),
        );
      },
    );
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/** (c): each side's warm rate, latency and ratio to one local transaction, then its cold latency. */
function referenceLines(r: ReferenceBenchResult): string[] {
  const ms = (v: number) => `${v.toFixed(2)} ms`;
  return [
    `(c) reference-table write: ${r.settings.rounds} rounds × ${r.settings.writes} writes per side, ${r.settings.concurrency} in flight, fsync ${r.settings.fsync}, synchronous_commit ${r.settings.synchronousCommit}`,
    ...r.sides.map(
      (s) =>
        `  ${s.name.padEnd(52)} ${String(s.median).padStart(6)}/s (p50 ${ms(s.p50Ms)}, p99 ${ms(s.p99Ms)})  ${s.ratio.toFixed(3)}×   cold p50 ${ms(s.cold.p50Ms)}, p99 ${ms(s.cold.p99Ms)}`,
    ),
  ];
}

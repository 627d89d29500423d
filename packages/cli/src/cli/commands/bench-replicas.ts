import type { Command } from 'commander';
import { benchReplicas } from '../../bench/replicas.js';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

export function registerBenchReplicasCommand(bench: Command): void {
  bench
    .command('replicas')
    .description(
      'read throughput with a streaming replica serving reads vs the primary alone, and the OpenTelemetry hook without an SDK vs none, side by side',
    )
    .option('--rounds <n>', 'rounds (sides alternate in each)', positiveInteger('--rounds'), 30)
    .option('--slice-ms <n>', 'milliseconds per side per round', positiveInteger('--slice-ms'), 500)
    .option('--clients <n>', 'concurrent readers', positiveInteger('--clients'), 8)
    .option('--json', 'print the result as JSON')
    .action(async (flags: { rounds: number; sliceMs: number; clients: number; json?: boolean }) => {
      const result = await benchReplicas({
        ...flags,
        onProgress: flags.json || !process.stderr.isTTY ? undefined : (m) => process.stderr.write(`${m}\n`),
      });
      if (flags.json) {
        process.stdout.write(`${toJson(result)}\n`);
        return;
      }
      const line = (name: string, r: typeof result.telemetry, base: string, cand: string) =>
        `${name}: ${r.ratio.toFixed(3)}× (rounds ${r.min.toFixed(3)}–${r.max.toFixed(3)}); ${cand} ${Math.round(median(r.candidate))}/s vs ${base} ${Math.round(median(r.baseline))}/s`;
      process.stdout.write(
        [
          `bench replicas: ${result.rounds} rounds × ${result.sliceMs} ms per side, ${result.clients} clients, readOnly withShard by primary key`,
          line('reads with a replica', result.replicaReads, 'primary only', 'primary + replica'),
          `  the replica served ${(result.replicaShare * 100).toFixed(1)}% of the reads on its side`,
          line('telemetry hook, no SDK', result.telemetry, 'telemetry off', 'on'),
          line('control: two identical routers', result.control, 'A', 'B'),
          `  the hook alone: ${Math.round(result.hookNsPerEvent)} ns per operation event, ${(result.hookCpuShare * 100).toFixed(3)}% of one core at ${Math.round(median(result.telemetry.candidate))} operations/s`,
          '',
        ].join('\n'),
      );
    });
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

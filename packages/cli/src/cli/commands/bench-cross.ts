import type { Command } from 'commander';
import { benchCross, type SideResult } from '../../bench/cross.js';
import { benchCrossContended, type ContendedResult } from '../../bench/cross-contended.js';
import { type ReferenceBenchResult, runReferenceBench } from '../../bench/reference.js';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

export function registerBenchCrossCommand(bench: Command): void {
  bench
    .command('cross')
    .description(
      'transfers across shards: withShards on one server and across two (two-phase commit) vs the same updates in one local transaction; (c) a reference-table write on 1, 2 and 4 servers; --contended: transfers both ways among a few hot accounts, with the deadlock detector and with lock_timeout only',
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
    .option('--contended', 'instead: transfers in both directions among a few hot accounts on two servers')
    .option(
      '--hot-accounts <n>',
      '--contended: hot accounts on each server',
      positiveInteger('--hot-accounts'),
      4,
    )
    .option('--seconds <n>', '--contended: seconds per side', positiveInteger('--seconds'), 15)
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
        contended?: boolean;
        hotAccounts: number;
        seconds: number;
        json?: boolean;
      }) => {
        const onProgress =
          flags.json || !process.stderr.isTTY ? undefined : (m: string) => process.stderr.write(`${m}\n`);
        if (flags.contended) {
          const contended = await benchCrossContended({ ...flags, onProgress });
          process.stdout.write(flags.json ? `${toJson(contended)}\n` : contendedLines(contended));
          return;
        }
        const result = await benchCross({ ...flags, onProgress });
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
            row('(b0) as (b), no deadlock detector or bounds', result.twoServersBare),
            `round trips per transfer: baseline ${result.roundTrips.baseline}, (a) ${result.roundTrips.oneServer}, (b) ${result.roundTrips.twoServers}, (b0) ${result.roundTrips.twoServersBare}`,
            `(a) one server vs one local transaction: ${ratio(result.ratioOneServer, 0.95)}`,
            `(b) two servers vs one local transaction: ${ratio(result.ratioTwoServers, 0.45)}`,
            `(b) vs (b0), the detector and bounds when nothing waits: ${ratio(result.ratioDetector, 0.95)}`,
            ...(reference ? referenceLines(reference) : []),
            '',
          ].join('\n'),
        );
      },
    );
}

/** The contended mode's table: per side, rate, deadlocks, timeouts, latencies, the longest call, the total. */
function contendedLines(r: ContendedResult): string {
  const ms = (v: number) => `${Math.round(v).toLocaleString('en-US')} ms`;
  return [
    `bench cross --contended: 2 embedded servers, fsync ${r.fsync ? 'on' : 'off'}; ${r.clients} clients, ${r.hotAccounts} hot accounts on each server, transfers both ways (debit first), ${r.seconds} s per side, no retries`,
    '| side | transfers/s | calls | deadlocks | lock timeouts | other failures | hung | p50 | p99 | longest call | total conserved |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    ...r.sides.map(
      (s) =>
        `| ${s.name} | ${s.committedPerSecond.toFixed(1)} | ${s.calls} | ${s.deadlocks} | ${s.lockTimeouts} | ${
          Object.entries(s.otherFailures)
            .map(([c, n]) => `${c} ${n}`)
            .join(', ') || 0
        } | ${s.hung} | ${ms(s.p50Ms)} | ${ms(s.p99Ms)} | ${ms(s.longestMs)} | ${s.conserved ? 'yes' : 'NO'} |`,
    ),
    `longest call with the detector: ${ms(r.sides[0]?.longestMs ?? 0)}, target < 3,000 ms: ${(r.sides[0]?.longestMs ?? 0) < 3000 ? 'met' : 'MISSED'}`,
    '',
  ].join('\n');
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

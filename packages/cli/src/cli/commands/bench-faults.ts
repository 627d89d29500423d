import type { Command } from 'commander';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { toJson } from './output.js';

/** `shardflake bench faults`: shard moves under failover, killed and frozen movers, routers behind on config. */
export function registerBenchFaultsCommand(bench: Command): void {
  bench
    .command('faults')
    .description(
      'run shard moves and writes across servers through faults (failover with and without a lagging replica, the mover killed -9 or frozen, routers on an older config; transfers with the coordinator killed at each phase, a participant or the decision server failed over, a shard moved; racing unique claims; reference writes through a move to a new server; transfers under contention) on embedded servers with writers logging every acknowledged call; exits 1 if any is lost, half-applied, duplicated, diverged or hung, or a shard was writable on two nodes',
    )
    .option('--scenarios <names>', 'comma-separated scenarios to run (default: all)')
    .option('--json', 'print the results as JSON')
    .action(async (flags: { scenarios?: string; json?: boolean }) => {
      // Loaded on use: the benchmark's dependencies load only when it runs.
      const { runFaultsBench, SCENARIO_NAMES } = await import('../../bench/faults.js');
      const wanted = flags.scenarios?.split(',').map((s) => s.trim());
      const unknown = wanted?.filter((s) => !(SCENARIO_NAMES as string[]).includes(s)) ?? [];
      if (unknown.length > 0) {
        throw new ShardflakeError(
          'INVALID_ARGUMENT',
          `--scenarios: no scenario ${unknown.join(', ')} (scenarios: ${SCENARIO_NAMES.join(', ')})`,
        );
      }
      const result = await runFaultsBench({
        scenarios: wanted as typeof SCENARIO_NAMES | undefined,
        onProgress: flags.json ? undefined : (m) => process.stderr.write(`${m}\n`),
      });
      if (flags.json) process.stdout.write(`${toJson(result)}\n`);
      else process.stdout.write(`${faultsTable(result.scenarios, result.startedAt)}\n`);
      if (result.faultsFound) process.exitCode = 1;
    });
}

type Results = Awaited<ReturnType<typeof import('../../bench/faults.js').runFaultsBench>>['scenarios'];

/** The table of scenarios, as docs/moves.md shows it (markdown). */
function faultsTable(scenarios: Results, startedAt: string): string {
  const rows = scenarios.map(
    (s) =>
      `| ${s.name} | ${s.acknowledged.toLocaleString('en-US')} | ${s.lost} | ${s.halfApplied} | ${s.duplicated} | ${s.diverged} | ${s.hung} | ${s.doubleWritable.length} | ${s.longestGapMs.toLocaleString('en-US')} ms | ${s.checks} |`,
  );
  const notes = scenarios.flatMap((s) => [
    `- ${s.name}: ${s.title}. ${s.notes.join('; ')}.${
      Object.keys(s.failedInserts).length > 0
        ? ` Failed (unacknowledged) calls: ${Object.entries(s.failedInserts)
            .map(([c, n]) => `${c} ${n}`)
            .join(', ')}.`
        : ''
    }`,
    ...s.doubleWritable.map((d) => `  DOUBLE-WRITABLE shard ${d.shard} on ${d.nodes.join(' and ')}`),
    ...s.lostExamples.map((l) => (/^[A-Z-]+ /.test(l) ? `  ${l}` : `  LOST ${l}`)),
  ]);
  return [
    `bench faults, ${startedAt}`,
    '',
    '| scenario | acknowledged | lost | half-applied | duplicated | diverged | hung | double-writable shards | longest gap | checks |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows,
    '',
    ...notes,
  ].join('\n');
}

import type { Command } from 'commander';
import { positiveInteger } from './options.js';
import { phasedProgress, toJson } from './output.js';

/** `shardflake bench adopt`: a live database adopted into two servers under a writer (src/bench/adopt.ts). */
export function registerBenchAdoptCommand(bench: Command): void {
  bench
    .command('adopt')
    .description(
      'adopt a live source (users, photos) into two embedded servers while a router writer inserts: copy time vs a plain COPY pipe, stream lag, the cutover pause, writes lost or doubled',
    )
    .option('--users <n>', 'users in the source', positiveInteger('--users'), 100_000)
    .option('--photos <n>', 'photos in the source', positiveInteger('--photos'), 1_000_000)
    .option('--shards <n>', 'logical shards', positiveInteger('--shards'), 1024)
    .option(
      '--stream-ms <n>',
      'how long the writer runs against the stream before the cutover',
      positiveInteger('--stream-ms'),
      10_000,
    )
    .option('--json', 'print the results as JSON')
    .action(
      async (flags: { users: number; photos: number; shards: number; streamMs: number; json?: boolean }) => {
        const { runAdoptBench } = await import('../../bench/adopt.js');
        const bar = phasedProgress(9, !flags.json);
        const r = await runAdoptBench({ ...flags, onProgress: (p, d, t) => bar.update(p, d, t) }).finally(
          () => bar.stop(),
        );
        if (flags.json) {
          process.stdout.write(`${toJson(r)}\n`);
          return;
        }
        const ok = (b: boolean) => (b ? 'meets' : 'MISSES');
        process.stdout.write(
          [
            `adopt ${r.users.toLocaleString('en-US')} users and ${r.photos.toLocaleString('en-US')} photos into 2 servers, ${r.shards} shards (${r.machine.cpus} CPUs, load ${r.machine.loadAverage.join(' ')}, Node ${r.machine.node})`,
            `  copy          ${r.copy.ms} ms vs ${r.copy.baselineMs} ms for COPY … TO STDOUT | COPY … FROM STDIN into one server: ${r.copy.ratio}× (${ok(r.copy.meetsTarget)} target ≤ ${r.copy.targetRatio}×)`,
            `  stream lag    p50 ${(r.lag.p50Bytes / 1e3).toFixed(0)} kB, max ${(r.lag.maxBytes / 1e3).toFixed(0)} kB of WAL behind the writer (${r.lag.samples} samples); ${r.changesApplied} changes applied`,
            `  cutover       writes paused ${r.cutover.pauseMs} ms (${ok(r.cutover.meetsTarget)} target ≤ ${r.cutover.targetMs} ms); longest router write ${r.cutover.longestWriteMs} ms; verify: pinned in ${r.cutover.verifyPauseMs} ms, compared in ${r.cutover.verifyMs} ms`,
            `  writes        ${r.writes.acknowledged} acknowledged, ${r.writes.lost} lost, ${r.writes.doubled} doubled, ${r.writes.failed} failed`,
            '',
          ].join('\n'),
        );
      },
    );
}

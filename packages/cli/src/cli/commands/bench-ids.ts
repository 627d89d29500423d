import { SingleBar } from 'cli-progress';
import type { Command } from 'commander';
import { type IdsBenchResult, runIdsBench } from '../../bench/ids.js';
import { positiveInteger } from './options.js';
import { writeBenchReport } from './report-option.js';

function table(result: IdsBenchResult): string {
  const rows = result.entries.map((e) => [
    e.name,
    e.idsPerSecond.toLocaleString('en-US'),
    e.cap ? e.cap.toLocaleString('en-US') : '',
    e.ratioToCap?.toFixed(3) ?? '',
    e.ratioToRandomUUID?.toFixed(3) ?? '',
    e.checked.toLocaleString('en-US'),
    String(e.duplicates),
    String(e.orderViolations),
  ]);
  const header = [
    'generator',
    'ids/s',
    'cap ids/s',
    '÷ cap',
    '÷ randomUUID',
    'ids checked',
    'duplicates',
    'not increasing',
  ];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number)))
      .join('  ');
  const targets = result.targets.map(
    (t) =>
      `${t.met ? 'met    ' : 'MISSED '} ${t.what}: ${t.actual} (target ${t.what.startsWith('duplicates') ? '=' : '≥'} ${t.target})`,
  );
  return [
    `node ${result.node}, ${result.cpus} CPUs, load ${result.loadAverage.start.toFixed(2)} → ${result.loadAverage.end.toFixed(2)}; best of ${result.rounds} rounds of ${result.durationMs} ms each`,
    line(header),
    ...rows.map(line),
    '',
    ...targets,
  ].join('\n');
}

export function registerBenchIdsCommand(bench: Command): void {
  bench
    .command('ids')
    .description(
      'id generation throughput: our generators vs their caps and vs peer libraries, duplicates counted',
    )
    .option('--json', 'print the result as JSON')
    .option('--duration <ms>', 'real time per generator and round', positiveInteger('--duration'), 1000)
    .option('--rounds <n>', 'interleaved rounds; the best counts', positiveInteger('--rounds'), 3)
    .option('--only <names>', 'comma-separated substrings of generator names')
    .option('--report <file>', 'also write a self-contained HTML report')
    .action(
      async (opts: { json?: boolean; duration: number; rounds: number; only?: string; report?: string }) => {
        const showBar = process.stderr.isTTY && !opts.json;
        const bar = showBar
          ? new SingleBar({ format: 'bench ids [{bar}] {value}/{total} {name}', stream: process.stderr })
          : null;
        const result = await runIdsBench({
          durationMs: opts.duration,
          rounds: opts.rounds,
          only: opts.only
            ?.split(',')
            .map((s) => s.trim())
            .filter(Boolean),
          onProgress: (done, total, name) => {
            if (!bar) return;
            if (done === 0) bar.start(total, 0, { name });
            bar.update(done, { name });
            if (done === total) bar.stop();
          },
        });
        process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : `${table(result)}\n`);
        if (opts.report) {
          await writeBenchReport(opts.report, 'shardflake bench ids', [
            {
              title: 'Id generation throughput (bench ids)',
              description: 'Best of the interleaved rounds; duplicates counted on a separate pass.',
              result,
              bars: {
                title: 'ids per second',
                unit: 'ids/s',
                values: result.entries.map((e) => ({ label: e.name, value: e.idsPerSecond })),
              },
            },
          ]);
        }
      },
    );
}

import type { Command } from 'commander';
import { runSqlBench, type SqlBenchResult } from '../../bench/sql.js';
import { positiveInteger } from '../options.js';
import { writeBenchReport } from '../report-option.js';

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

function printText(r: SqlBenchResult): void {
  const n = r.nextId;
  const lines = [
    `PostgreSQL ${r.server.version} (${r.server.embedded ? 'embedded' : r.server.url}), ${r.machine.cpus} CPUs, ${r.settings.rounds} rounds, medians`,
    '',
    `bulk INSERT … SELECT of ${fmt(r.settings.rows)} rows`,
    `  bigserial   ${fmt(r.bigserial.bulkMs.median)} ms`,
    `  next_id()   ${fmt(n.bulk.ms.median)} ms   ${n.bulk.ratio.toFixed(2)}× bigserial   time bits ahead of the clock at the end: ${n.bulk.aheadMs.map((a) => a.toFixed(0)).join(', ')} ms`,
    '',
    `single-row inserts, ${r.settings.clients} clients, ${r.settings.seconds} s per side per round (synchronous_commit off)`,
    `  bigserial   ${fmt(r.bigserial.singlePerSecond.median)} /s`,
    `  next_id()   ${fmt(n.single.perSecond.median)} /s   ${n.single.ratio.toFixed(2)}× bigserial`,
    '',
    `calls per second over ${fmt(r.settings.callRows)} rows`,
    `  nextval()   ${fmt(r.bigserial.nextvalPerSecond.median)} /s`,
    `  next_id()   ${fmt(n.calls.perSecond.median)} /s   ${n.calls.ratio.toFixed(2)}× nextval`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

export function registerBenchSqlCommand(bench: Command): void {
  bench
    .command('sql')
    .description('the in-database generator against bigserial on the same server: bulk, single-row, calls/s')
    .option('--json', 'print the figures as JSON')
    .option('--url <url>', 'use this server instead of an embedded one')
    .option(
      '--rows <n>',
      'rows of the bulk INSERT … SELECT and of the calls comparison',
      positiveInteger('--rows'),
    )
    .option('--rounds <n>', 'alternating rounds per measurement', positiveInteger('--rounds'))
    .option('--seconds <n>', 'seconds of single-row inserts per side per round', positiveInteger('--seconds'))
    .option('--clients <n>', 'connections for single-row inserts', positiveInteger('--clients'))
    .option('--report <file>', 'also write a self-contained HTML report')
    .action(async (opts) => {
      const tty = process.stderr.isTTY && !opts.json;
      const result = await runSqlBench({
        url: opts.url,
        rows: opts.rows,
        rounds: opts.rounds,
        seconds: opts.seconds,
        clients: opts.clients,
        callRows: opts.rows,
        onProgress: tty
          ? (phase, done, total) => process.stderr.write(`\r${phase} ${done}/${total}   `)
          : undefined,
      });
      if (tty) process.stderr.write('\r\x1b[K');
      if (opts.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      else printText(result);
      if (opts.report) {
        const n = result.nextId;
        await writeBenchReport(opts.report, 'shardflake bench sql', [
          {
            title: 'next_id() against bigserial (bench sql)',
            description:
              'Each bar is next_id() divided by bigserial (or nextval()) on the same server in the same run, medians of alternating rounds. Bulk is a time (lower is better; target ≤ 1.3); single-row inserts and calls are rates (higher is better; single-row target ≥ 0.95).',
            result,
            bars: {
              title: 'next_id() / bigserial',
              unit: '×',
              values: [
                { label: 'bulk INSERT … SELECT time', value: n.bulk.ratio },
                { label: 'single-row inserts per second', value: n.single.ratio },
                { label: 'calls per second (vs nextval)', value: n.calls.ratio },
              ],
            },
          },
        ]);
      }
    });
}

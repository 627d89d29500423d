import type { Command } from 'commander';
import { runSqlBench, type SqlBenchResult, type SqlBenchVariantResult } from '../../bench/sql.js';
import { positiveInteger } from '../options.js';
import { writeBenchReport } from '../report-option.js';

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

function printText(r: SqlBenchResult): void {
  const b = r.bigserial;
  const row = (label: string, text: string) => `  ${label.padEnd(22)}${text}`;
  const each = (f: (v: SqlBenchVariantResult) => string) =>
    r.variants.map((v) => row(`next_id() ${v.language}`, f(v)));
  const lines = [
    `PostgreSQL ${r.server.version} (${r.server.embedded ? 'embedded' : r.server.url}), ${r.machine.cpus} CPUs, ${r.settings.rounds} rounds, medians`,
    '',
    `bulk INSERT … SELECT of ${fmt(r.settings.rows)} rows`,
    row('bigserial', `${fmt(b.bulkMs.median)} ms`),
    ...each(
      (v) =>
        `${fmt(v.bulk.value.median)} ms   ${v.bulk.ratio.toFixed(2)}× bigserial   time bits vs clock at the end: ${v.bulk.aheadMs.map((a) => a.toFixed(0)).join(', ')} ms`,
    ),
    '',
    `single-row inserts, ${r.settings.clients} clients, ${r.settings.seconds} s per side per round (synchronous_commit off)`,
    '  prepared (planned once per connection)',
    row('bigserial', `${fmt(b.singlePreparedPerSecond.median)} /s`),
    ...each(
      (v) => `${fmt(v.singlePrepared.value.median)} /s   ${v.singlePrepared.ratio.toFixed(2)}× bigserial`,
    ),
    '  unprepared (planned for every insert)',
    row('bigserial', `${fmt(b.singleUnpreparedPerSecond.median)} /s`),
    ...each(
      (v) => `${fmt(v.singleUnprepared.value.median)} /s   ${v.singleUnprepared.ratio.toFixed(2)}× bigserial`,
    ),
    '',
    `calls per second over ${fmt(r.settings.callRows)} rows`,
    row('nextval()', `${fmt(b.nextvalPerSecond.median)} /s`),
    ...each((v) => `${fmt(v.calls.value.median)} /s   ${v.calls.ratio.toFixed(2)}× nextval`),
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
        await writeBenchReport(opts.report, 'shardflake bench sql', [
          {
            title: 'next_id() against bigserial (bench sql)',
            description:
              'Each bar is next_id() divided by bigserial (or nextval()) on the same server in the same run, medians of alternating rounds, for next_id() written as one inlined SQL expression (sql, the default) and inside PL/pgSQL. Bulk is a time (lower is better; target ≤ 1.3); single-row inserts and calls are rates (higher is better; single-row target ≥ 0.95).',
            result,
            bars: {
              title: 'next_id() / bigserial',
              unit: '×',
              values: result.variants.flatMap((v) => [
                { label: `${v.language}: bulk INSERT … SELECT time`, value: v.bulk.ratio },
                { label: `${v.language}: single-row prepared /s`, value: v.singlePrepared.ratio },
                { label: `${v.language}: single-row unprepared /s`, value: v.singleUnprepared.ratio },
                { label: `${v.language}: calls /s (vs nextval)`, value: v.calls.ratio },
              ]),
            },
          },
        ]);
      }
    });
}

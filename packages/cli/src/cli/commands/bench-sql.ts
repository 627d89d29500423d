import type { Command } from 'commander';
import {
  runSqlBench,
  type SqlBenchRatio,
  type SqlBenchResult,
  type SqlBenchSide,
  type SqlBenchVariantResult,
} from '../../bench/sql.js';
import { positiveInteger } from './options.js';
import { writeBenchReport } from './report-option.js';

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

/** Rates per second of one single-row client, bigserial first; nothing when the client was skipped. */
function rateLines(
  r: SqlBenchResult,
  label: string,
  baseline: SqlBenchSide | null,
  of: (v: SqlBenchVariantResult) => SqlBenchRatio | null,
): string[] {
  if (baseline === null) return [];
  return [
    `  ${label}`,
    row('bigserial', `${fmt(baseline.median)} /s`),
    ...r.variants.map((v) => {
      const figure = of(v) as SqlBenchRatio;
      const spread = `rounds ${Math.min(...figure.ratios).toFixed(2)}–${Math.max(...figure.ratios).toFixed(2)}`;
      return row(
        `next_id() ${v.language}`,
        `${fmt(figure.value.median)} /s   ${figure.ratio.toFixed(2)}× bigserial (${spread})`,
      );
    }),
  ];
}

const row = (label: string, text: string) => `  ${label.padEnd(22)}${text}`;

function printText(r: SqlBenchResult): void {
  const b = r.bigserial;
  const each = (f: (v: SqlBenchVariantResult) => string) =>
    r.variants.map((v) => row(`next_id() ${v.language}`, f(v)));
  const pgbench =
    'skipped' in r.pgbench ? [`  pgbench: skipped (${r.pgbench.skipped})`] : [`  (${r.pgbench.version})`];
  const lines = [
    `PostgreSQL ${r.server.version} (${r.server.embedded ? 'embedded' : r.server.url}), ${r.machine.cpus} CPUs, ${r.settings.rounds} rounds, medians`,
    '',
    `bulk INSERT … SELECT of ${fmt(r.settings.rows)} rows`,
    row('bigserial', `${fmt(b.bulkMs.median)} ms`),
    ...each(
      (v) =>
        `${fmt(v.bulk.value.median)} ms   ${v.bulk.ratio.toFixed(2)}× bigserial   time bits vs clock at the end: ${v.bulk.aheadMs.map((a) => a.toFixed(0)).join(', ')} ms`,
    ),
    row(
      'naming next_id_bulk()',
      `${fmt(r.nextIdBulk.bulk.value.median)} ms   ${r.nextIdBulk.bulk.ratio.toFixed(2)}× bigserial   (the default install, INSERT … (id, v) SELECT next_id_bulk(), …)`,
    ),
    ...(b.bulkCpuMs
      ? [
          '  CPU time of the server process',
          row('bigserial', `${fmt(b.bulkCpuMs.median)} ms`),
          ...[
            ...r.variants.map((v) => [`next_id() ${v.language}`, v.bulkCpu] as const),
            ['naming next_id_bulk()', r.nextIdBulk.bulkCpu] as const,
          ].map(([label, figure]) => {
            const cpu = figure as SqlBenchRatio;
            return row(
              label,
              `${fmt(cpu.value.median)} ms   ${cpu.ratio.toFixed(2)}× bigserial (rounds ${Math.min(...cpu.ratios).toFixed(2)}–${Math.max(...cpu.ratios).toFixed(2)})`,
            );
          }),
        ]
      : []),
    '',
    `single-row inserts, ${r.settings.clients} clients, ${r.settings.seconds} s per round with every side interleaved, /s = clients ÷ mean latency (synchronous_commit off)`,
    ...pgbench,
    ...rateLines(
      r,
      'pgbench, simple protocol (planned for every insert)',
      b.pgbenchSimplePerSecond,
      (v) => v.pgbenchSimple,
    ),
    ...rateLines(
      r,
      'pgbench -M prepared (planned once per connection)',
      b.pgbenchPreparedPerSecond,
      (v) => v.pgbenchPrepared,
    ),
    ...rateLines(
      r,
      'node-postgres, unnamed statements (planned for every insert)',
      b.singleUnpreparedPerSecond,
      (v) => v.singleUnprepared,
    ),
    ...rateLines(
      r,
      'node-postgres, named statements (planned once per connection)',
      b.singlePreparedPerSecond,
      (v) => v.singlePrepared,
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
    .description(
      'the in-database generator against bigserial on the same server: bulk, single-row (pgbench simple and prepared, node-postgres unnamed and named), calls/s',
    )
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
    .option(
      '--pgbench <path>',
      'the pgbench binary (default: pgbench on PATH, else /usr/lib/postgresql/*/bin)',
    )
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
        pgbench: opts.pgbench,
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
              'Each bar is next_id() divided by bigserial (or nextval()) on the same server in the same run, medians of alternating rounds, for next_id() written in PL/pgSQL (plpgsql, the default) and as one inlined SQL expression (sql). Bulk is a time (lower is better; target ≤ 1.3); single-row inserts and calls are rates (higher is better; targets ≥ 0.90 for statements planned per insert, ≥ 0.95 for prepared ones).',
            result,
            bars: {
              title: 'next_id() / bigserial',
              unit: '×',
              values: result.variants
                .flatMap((v) => [
                  { label: `${v.language}: bulk INSERT … SELECT time`, value: v.bulk.ratio },
                  ...(v.bulkCpu
                    ? [{ label: `${v.language}: bulk INSERT … SELECT server CPU`, value: v.bulkCpu.ratio }]
                    : []),
                  ...(v.pgbenchSimple && v.pgbenchPrepared
                    ? [
                        {
                          label: `${v.language}: single-row pgbench simple /s`,
                          value: v.pgbenchSimple.ratio,
                        },
                        {
                          label: `${v.language}: single-row pgbench prepared /s`,
                          value: v.pgbenchPrepared.ratio,
                        },
                      ]
                    : []),
                  {
                    label: `${v.language}: single-row node-postgres unnamed /s`,
                    value: v.singleUnprepared.ratio,
                  },
                  {
                    label: `${v.language}: single-row node-postgres named /s`,
                    value: v.singlePrepared.ratio,
                  },
                  { label: `${v.language}: calls /s (vs nextval)`, value: v.calls.ratio },
                ])
                .concat([
                  {
                    label: 'naming next_id_bulk(): bulk INSERT … SELECT time',
                    value: result.nextIdBulk.bulk.ratio,
                  },
                  ...(result.nextIdBulk.bulkCpu
                    ? [
                        {
                          label: 'naming next_id_bulk(): bulk INSERT … SELECT server CPU',
                          value: result.nextIdBulk.bulkCpu.ratio,
                        },
                      ]
                    : []),
                ]),
            },
          },
        ]);
      }
    });
}

import type { Command } from 'commander';
import { runSqlBench, type SqlBenchResult } from '../../bench/sql.js';
import { ShardflakeError } from '../../errors.js';
import { GUARD_KINDS, type GuardKind } from '../../postgres/generator-sql.js';

function positiveInt(flag: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < 1) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `${flag} must be a positive whole number, not ${JSON.stringify(value)}`,
      );
    }
    return n;
  };
}

function guards(value: string): GuardKind[] {
  const list = value.split(',').map((g) => g.trim());
  for (const g of list) {
    if (!(GUARD_KINDS as readonly string[]).includes(g)) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `--guards takes ${GUARD_KINDS.join(', ')}, not ${JSON.stringify(g)}`,
      );
    }
  }
  return list as GuardKind[];
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

function printText(r: SqlBenchResult): void {
  const lines = [
    `PostgreSQL ${r.server.version} (${r.server.embedded ? 'embedded' : r.server.url}), ${r.machine.cpus} CPUs, ${r.settings.rounds} rounds, medians`,
    '',
    `bulk INSERT … SELECT of ${fmt(r.settings.rows)} rows`,
    `  bigserial            ${fmt(r.bigserial.bulkMs.median)} ms`,
    ...r.guards.map(
      (g) =>
        `  next_id (${g.guard})`.padEnd(23) +
        `${fmt(g.bulk.nextIdMs.median)} ms   ${g.bulk.ratio.toFixed(2)}× bigserial   time bits ahead of the clock at the end: ${g.bulk.aheadMs.map((a) => a.toFixed(0)).join(', ')} ms`,
    ),
    '',
    `single-row inserts, ${r.settings.clients} clients, ${r.settings.seconds} s per side per round`,
    `  bigserial            ${fmt(r.bigserial.singlePerSecond.median)} /s`,
    ...r.guards.map(
      (g) =>
        `  next_id (${g.guard})`.padEnd(23) +
        `${fmt(g.single.nextIdPerSecond.median)} /s   ${g.single.ratio.toFixed(2)}× bigserial`,
    ),
    '',
    `calls per second over ${fmt(r.settings.callRows)} rows`,
    `  nextval()            ${fmt(r.bigserial.nextvalPerSecond.median)} /s`,
    ...r.guards.map(
      (g) =>
        `  next_id (${g.guard})`.padEnd(23) +
        `${fmt(g.calls.nextIdPerSecond.median)} /s   ${g.calls.ratio.toFixed(2)}× nextval`,
    ),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

export function registerBenchSqlCommand(bench: Command): void {
  bench
    .command('sql')
    .description('the in-database generator against bigserial on the same server: bulk, single-row, calls/s')
    .option('--json', 'print the figures as JSON')
    .option('--url <url>', 'use this server instead of an embedded one')
    .option('--rows <n>', 'rows of the bulk INSERT … SELECT', positiveInt('--rows'))
    .option('--rounds <n>', 'alternating rounds per measurement', positiveInt('--rounds'))
    .option('--seconds <n>', 'seconds of single-row inserts per side per round', positiveInt('--seconds'))
    .option('--clients <n>', 'connections for single-row inserts', positiveInt('--clients'))
    .option('--guards <list>', `guards to measure (${GUARD_KINDS.join(',')})`, guards)
    .action(async (opts) => {
      const tty = process.stderr.isTTY && !opts.json;
      const result = await runSqlBench({
        url: opts.url,
        rows: opts.rows,
        rounds: opts.rounds,
        seconds: opts.seconds,
        clients: opts.clients,
        callRows: opts.rows,
        guards: opts.guards,
        onProgress: tty
          ? (phase, done, total) => process.stderr.write(`\r${phase} ${done}/${total}   `)
          : undefined,
      });
      if (tty) process.stderr.write('\r\x1b[K');
      if (opts.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      else printText(result);
    });
}

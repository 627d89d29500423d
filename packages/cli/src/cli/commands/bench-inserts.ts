import { readFile, writeFile } from 'node:fs/promises';
import { basename } from 'node:path';
import type { Command } from 'commander';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import type { EngineResult, InsertBenchResult, InsertMode } from '../../bench/inserts.js';
import type { ReportSection } from '../../bench/report.js';
import type { TicketBenchResult } from '../../bench/tickets.js';
import { progressBar, toJson } from './output.js';

const integer = (v: string) => Number.parseInt(v, 10);
const collect = (v: string, previous: string[]) => [...previous, v];

/**
 * Runs `work` with an AbortSignal that Ctrl-C trips: the benchmark stops after the insert in flight, stops its
 * servers in its own `finally`, and reports what it measured. The CLI's own handler (stopEmbeddedServersOnSignals)
 * would otherwise stop the servers and exit at once, losing the results, so the SIGINT listeners are set aside
 * while the benchmark runs; a second Ctrl-C hands over to them (servers stopped, immediate exit).
 */
async function withInterrupt<T>(work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const others = process.listeners('SIGINT');
  for (const listener of others) process.removeListener('SIGINT', listener);
  const onSignal = () => {
    if (controller.signal.aborted) {
      process.removeListener('SIGINT', onSignal);
      if (others.length === 0) process.exit(130);
      for (const listener of others) (listener as (signal: string) => void)('SIGINT');
      return;
    }
    process.stderr.write('\nstopping after the insert in flight (Ctrl-C again to quit at once)…\n');
    controller.abort();
  };
  process.on('SIGINT', onSignal);
  try {
    return await work(controller.signal);
  } finally {
    process.removeListener('SIGINT', onSignal);
    for (const listener of others)
      if (!process.listeners('SIGINT').includes(listener)) process.on('SIGINT', listener);
    if (controller.signal.aborted) process.exitCode = 130;
  }
}

/** Reads `--include` files: other benchmarks' `--json` output, each shown as a generic report section. */
async function readSections(files: string[]): Promise<ReportSection[]> {
  return Promise.all(
    files.map(async (file) => {
      let result: unknown;
      try {
        result = JSON.parse(await readFile(file, 'utf8'));
      } catch (error) {
        throw new ShardflakeError('INVALID_ARGUMENT', `--include ${file}: not a readable JSON file`, {
          cause: error,
        });
      }
      const r = result as { title?: unknown; result?: unknown; bars?: ReportSection['bars'] };
      return typeof r.title === 'string' && 'result' in r
        ? ({ title: r.title, result: r.result, ...(r.bars ? { bars: r.bars } : {}) } as ReportSection)
        : { title: basename(file, '.json'), result };
    }),
  );
}

const pad = (text: string | number, width: number) => String(text).padStart(width);
const fixed = (value: number | undefined, digits: number) =>
  value === undefined || !Number.isFinite(value) ? '–' : value.toFixed(digits);

function engineText(engine: EngineResult): string[] {
  const head = `  ${'type'.padEnd(11)}${pad('slope ns/row [95% CI]', 32)}${pad('icpt ms', 9)}${pad('p50 µs', 9)}${pad('p99 µs', 9)}${pad('rows/s', 8)}${pad('idx MB', 8)}${pad('WAL B/row', 10)}${pad('FPI/row', 9)}${pad('reads/row', 10)}`;
  const lines = engine.types.map(
    (t) =>
      `  ${t.type.padEnd(11)}${pad(`${fixed(t.slopeNsPerRow, 3)} [${fixed(t.slopeCi.low, 3)}, ${fixed(t.slopeCi.high, 3)}]`, 32)}${pad(fixed(t.interceptNs / 1e6, 3), 9)}${pad(fixed(t.p50Us, 1), 9)}${pad(fixed(t.p99Us, 1), 9)}${pad(t.rowsPerSecond, 8)}${pad(fixed(t.indexBytes / 2 ** 20, 2), 8)}${pad(fixed(t.perRow.logBytes, 0), 10)}${pad(fixed(t.perRow.fullPageImages, 3), 9)}${pad(fixed(t.perRow.blocksRead, 3), 10)}`,
  );
  return [engine.description, head, ...lines, ...engine.notes.map((n) => `  * ${n}`), ''];
}

function insertText(result: InsertBenchResult): string {
  const pg = result.engines.find((e) => e.engine === 'postgres');
  const paper = Object.entries(result.paper).map(([name, p]) => {
    const ours = pg?.types.find((t) => t.type === p.ours);
    const mine = ours
      ? `${fixed(ours.slopeNsPerRow, 3)} [${fixed(ours.slopeCi.low, 3)}, ${fixed(ours.slopeCi.high, 3)}] ns/row, ${fixed(ours.interceptNs / 1e6, 3)} ms`
      : 'not run';
    return `  ${name.padEnd(5)} paper ${p.slope.toFixed(3)} ns/row, ${(p.intercept / 1e6).toFixed(3)} ms   ours (${p.ours}) ${mine}`;
  });
  return [
    `bench inserts (${result.mode}): ${result.rows} timed inserts per type${result.preload ? ` after ${result.preload} preloaded` : ''}, batches of ${result.batch}, ${result.durationSeconds} s${result.interrupted ? ' — INTERRUPTED, partial results' : ''}`,
    '',
    ...result.engines.flatMap(engineText),
    'against the paper (table 1):',
    ...paper,
    `machine: ${result.machine.cpus} CPUs, ${result.machine.memoryGiB} GiB, Node ${result.machine.node}, load ${result.machine.loadAverage.join(' ')}`,
    '',
  ].join('\n');
}

function ticketText(result: TicketBenchResult): string {
  return [
    `bench tickets: ${result.ids} ids per method and round, ${result.rounds} rounds, ${result.concurrency} clients`,
    `  ${'method'.padEnd(26)}${pad('ids/s', 9)}${pad('rows/s', 9)}${pad('trips/id', 10)}${pad('insert p50 µs', 15)}${pad('p99 µs', 9)}`,
    ...result.methods.map(
      (m) =>
        `  ${m.method.padEnd(26)}${pad(m.idsPerSecond, 9)}${pad(m.rowsPerSecond, 9)}${pad(fixed(m.roundTripsPerId, 3), 10)}${pad(fixed(m.insertP50Us, 1), 15)}${pad(fixed(m.insertP99Us, 1), 9)}`,
    ),
    ...result.notes.map((n) => `  * ${n}`),
    '',
  ].join('\n');
}

export function registerBenchInsertsCommand(bench: Command): void {
  bench
    .command('inserts')
    .description(
      "the LSID paper's insert experiment, extended: per id type N single-row inserts, latency regression, p50/p99, index size, WAL",
    )
    .option('--rows <n>', 'timed single-row inserts per id type', integer, 100_000)
    .option('--types <list>', 'comma-separated id types (default: all)')
    .option('--url <url>', 'PostgreSQL server to use instead of an embedded one')
    .option('--mysql <url>', 'also run on MariaDB/MySQL (InnoDB), e.g. mysql://root@127.0.0.1:3306/test')
    .option(
      '--small-cache',
      'shrink the cache (shared_buffers 16MB, InnoDB pool 32MB) and preload so indexes outgrow it',
    )
    .option('--paper', "the paper's setup: default settings, uuidv4/ulid-text/lsid-text, no preload")
    .option(
      '--preload <n>',
      'rows bulk-loaded per type before timing (default 0; 500000 with --small-cache)',
      integer,
    )
    .option('--batch <n>', 'rows per interleaved batch (default rows/20)', integer)
    .option('--seed <n>', 'seed for the shuffled type order and the bootstrap', integer, 1)
    .option('--json', 'print the results as JSON')
    .option('--report <file>', 'write a self-contained HTML report')
    .option(
      '--include <file>',
      "add another benchmark's --json output to the report (repeatable)",
      collect,
      [],
    )
    .action(
      async (flags: {
        rows: number;
        types?: string;
        url?: string;
        mysql?: string;
        smallCache?: boolean;
        paper?: boolean;
        preload?: number;
        batch?: number;
        seed: number;
        json?: boolean;
        report?: string;
        include: string[];
      }) => {
        if (flags.paper && flags.smallCache) {
          throw new ShardflakeError(
            'INVALID_ARGUMENT',
            '--paper and --small-cache are different setups: choose one',
          );
        }
        // Loaded on use: the benchmark's dependencies load only when it runs.
        const { runInsertBench } = await import('../../bench/inserts.js');
        const { parseTypeList } = await import('../../bench/inserts-types.js');
        const mode: InsertMode = flags.paper ? 'paper' : flags.smallCache ? 'small-cache' : 'default';
        const sections = await readSections(flags.include);
        let phase = '';
        let bar = progressBar('', false);
        const result = await withInterrupt((signal) =>
          runInsertBench({
            rows: flags.rows,
            mode,
            seed: flags.seed,
            signal,
            ...(flags.types ? { types: parseTypeList(flags.types) } : {}),
            ...(flags.url ? { url: flags.url } : {}),
            ...(flags.mysql ? { mysql: flags.mysql } : {}),
            ...(flags.preload !== undefined ? { preload: flags.preload } : {}),
            ...(flags.batch !== undefined ? { batch: flags.batch } : {}),
            onProgress: (name, done, total) => {
              if (name !== phase) {
                bar.stop();
                phase = name;
                bar = progressBar(name.padEnd(18), !flags.json);
              }
              bar.update(done, total);
            },
          }).finally(() => bar.stop()),
        );
        if (flags.report) {
          const { renderReport } = await import('../../bench/report.js');
          await writeFile(flags.report, await renderReport({ inserts: result, sections }));
        }
        process.stdout.write(flags.json ? `${toJson(result)}\n` : insertText(result));
        if (flags.report && !flags.json) process.stdout.write(`report: ${flags.report}\n`);
      },
    );

  bench
    .command('tickets')
    .description(
      'D3 baselines: Flickr-style ticket servers (odd/even on two servers) and central range allocation vs next_id() in the database',
    )
    .option('--ids <n>', 'ids per method and round', integer, 5000)
    .option('--rounds <n>', 'rounds (methods interleaved, order shuffled)', integer, 3)
    .option('--concurrency <n>', 'clients asking for ids at once', integer, 4)
    .option('--range <n>', 'ids per block handed out by the central counter', integer, 1000)
    .option('--json', 'print the results as JSON')
    .option('--report <file>', 'write a self-contained HTML report')
    .action(
      async (flags: {
        ids: number;
        rounds: number;
        concurrency: number;
        range: number;
        json?: boolean;
        report?: string;
      }) => {
        const { runTicketBench, ticketSection } = await import('../../bench/tickets.js');
        const bar = progressBar('tickets'.padEnd(18), !flags.json);
        const result = await withInterrupt((signal) =>
          runTicketBench({
            ids: flags.ids,
            rounds: flags.rounds,
            concurrency: flags.concurrency,
            rangeSize: flags.range,
            signal,
            onProgress: (done, total) => bar.update(done, total),
          }).finally(() => bar.stop()),
        );
        if (flags.report) {
          const { renderReport } = await import('../../bench/report.js');
          await writeFile(flags.report, await renderReport({ sections: [ticketSection(result)] }));
        }
        process.stdout.write(flags.json ? `${toJson(result)}\n` : ticketText(result));
      },
    );
}

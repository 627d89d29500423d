import { readAdoption } from '../catalog/adopt.js';
import { type DeadlocksStatus, readDeadlocks } from '../catalog/deadlocks.js';
import { lastRestorePoint, type RestorePointRecord } from '../catalog/restore-points.js';
import { readClusterInfo, readShardMap, readShardVersions, type ShardState } from '../catalog/shards.js';
import { type ClusterConfig, targetVersion } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { resolveLayout, withEpoch } from '../ids/layout.js';
import { connect, describeUrl, wrapPgError } from '../postgres/connect.js';
import { readTransactionsStatus, type TransactionsStatus } from '../recovery/cluster-access.js';
import { TRANSACTION_DEFAULTS } from '../recovery/state.js';
import { serverNodeUrls } from '../topology/connections.js';
import { historyReport } from './migrations.js';
import { type MoveStatus, moveWarnings, readMoveStatus } from './status-moves.js';
import { type NodeStatus, readNodes, readShardStats, type ShardStats } from './status-stats.js';

export type { NodeStatus, ShardStats } from './status-stats.js';

/**
 * `cluster status`: the map as the catalog holds it, shard counts per server, schema versions, and how long the
 * layout's ids keep fitting a signed bigint (with a warning when that date is near).
 */
export const OVERFLOW_WARNING_YEARS = 5;

/**
 * One logical shard in `cluster status`: where it lives, its state and schema version, and its rows, bytes and
 * writes when its server answers.
 */
export interface ShardStatus extends Partial<Record<keyof ShardStats, number | null>> {
  /** The logical shard number, 0 to logicalShards − 1. */
  shard: number;
  /** The server the catalog's map places the shard on (it may be one the config no longer lists). */
  server: string;
  /** The shard's schema on that server, such as `shard_0042`. */
  schema: string;
  /** `active`, or `moving` while an online move copies it. */
  state: ShardState;
  /** The highest migration version applied to the shard (0: just the tables), as the catalog records it. */
  schemaVersion: number;
  /** The error of the shard's last failed `cluster migrate` step; null once a migration succeeds there. */
  lastError: string | null;
}

/**
 * What `cluster status --json` prints and the dashboard serves at /api/status: the map, the layout's limits, schema
 * versions, servers and their nodes, shards, moves and warnings.
 */
export interface ClusterStatus {
  /**
   * The shard map's version: the value `router.mapVersion` holds as a bigint, a number here because the status is
   * JSON (`--json`, the dashboard); map versions count changes and stay far below 2^53.
   */
  version: number;
  /** How many logical shards the cluster was created with. */
  logicalShards: number;
  /** Shards in the map (fewer than logicalShards while init is unfinished). */
  mappedShards: number;
  /** The name of the cluster's id layout preset, such as `instagram`. */
  layout: string;
  /** The ids' epoch as an ISO 8601 date. */
  epoch: string;
  /** When ids stop fitting a signed 64-bit integer (null if the layout never uses the sign bit). */
  signedOverflowAt: string | null;
  /** When the layout's time field runs out. */
  exhaustsAt: string;
  /**
   * The schema version shards should be at: the cluster's recorded history, or the config's last migration when
   * the config has newer ones still to apply.
   */
  targetSchemaVersion: number;
  /** How the config's migrations differ from the history the cluster keeps (one sentence each; also in warnings). */
  migrationDifferences: string[];
  /** Schema version → number of shards at it. */
  schemaVersions: Record<string, number>;
  /**
   * Every server of the config, then any server the map names that the config lacks (url `(not in config)`).
   */
  servers: {
    /** The server's name in the config (or in the catalog's map). */
    name: string;
    /** The server's first node URL with its password redacted, or `(not in config)`. */
    url: string;
    /** How many logical shards the map places on this server. */
    shards: number;
    /** True when one of the server's nodes answered as its primary. */
    reachable: boolean;
    /** Each node's role, connections and replica lag, in config order. */
    nodes: NodeStatus[];
  }[];
  /**
   * Problems worth acting on, one sentence each (unmade shards, schema drift, unreachable servers, moves,
   * …).
   */
  warnings: string[];
  /** Unfinished (and abandoned) moves, leftover copies on any node (status-moves.ts). */
  moves: MoveStatus;
  /** Every shard in the map, by shard number, with its statistics when its server answers. */
  shards: ShardStatus[];
  /**
   * Transactions across servers: servers that cannot take part (max_prepared_transactions = 0), and this
   * cluster's prepared transactions now with what their decision servers say (see transactions/cross.ts).
   */
  transactions: TransactionsStatus;
  /**
   * The latest restore point (`cluster restore-point`, docs/backups.md): its name, state (`taken`; `taking` while
   * it is written — or in a catalog restored to it; `partial`: never restore to it), times and each server's LSN.
   * Null when none was ever taken.
   */
  lastRestorePoint: RestorePointRecord | null;
  /**
   * Deadlocks across servers that routers broke (deadlocks/detector.ts), as the catalog records them: how many in
   * the last day and in the last 7, and the latest few.
   */
  deadlocks: DeadlocksStatus;
  /**
   * The adoption of a live database into this cluster (src/adopt/), when there is one: its phase (before
   * `switched` routers serve every shard from the source), the source without its password, the last LSN every
   * server applied and how far the source was ahead then, the cutover's write pause, and the boundary of old ids
   * (a string: it exceeds 2^53). `cluster adopt status` shows more.
   */
  adoption?: {
    /** copying, streaming, fenced, switched, done or aborted (catalog/adopt.ts). */
    phase: string;
    /** The source's URL without its password. */
    source: string;
    /** The root table: its rows own the others. */
    root: string;
    /** The last source LSN every server applied, or null before the stream started. */
    appliedLsn: string | null;
    /** How far the source's WAL was ahead of the stream when it last applied (bytes). */
    behindBytes: number | null;
    /** The cutover's write pause (ms), once it happened. */
    pauseMs: number | null;
    /** Every id below this is one the source made (a decimal string). */
    oldIdsBelow: string;
    /** What stopped the last run, or null. */
    lastError: string | null;
  };
}

/**
 * Reads the cluster's status: the map from the catalog, and from every node its role, connections, lag and
 * per-shard statistics (one query per server). A node that does not answer is reported, not thrown.
 */
export async function clusterStatus(config: ClusterConfig, now = Date.now()): Promise<ClusterStatus> {
  // Every node first, in parallel: the catalog's primary is found from the answers (status works while a
  // replica is down, and after a failover).
  const names = Object.keys(config.servers);
  const urls = new Map(names.map((name) => [name, serverNodeUrls(config, name)]));
  const nodes = new Map(
    await Promise.all(
      names.map(async (name) => [name, await readNodes(urls.get(name) as string[])] as const),
    ),
  );
  const primaryOf = (name: string): string | undefined => {
    const at = (nodes.get(name) ?? []).findIndex((n) => n.role === 'primary');
    return at === -1 ? undefined : urls.get(name)?.[at];
  };
  const catalog = await connect(primaryOf(config.catalog) ?? (config.servers[config.catalog] as string), {
    applicationName: 'shardflake status',
  }).catch((error: ShardflakeError) => {
    throw new ShardflakeError(error.code, `catalog server ${config.catalog}: ${error.message}`, {
      cause: error,
    });
  });
  try {
    const info = await readClusterInfo(catalog);
    if (!info) {
      throw new ShardflakeError(
        'INVALID_CONFIG',
        `no cluster on catalog server ${config.catalog}; run cluster init first`,
      );
    }
    const map = await readShardMap(catalog);
    const versions = await readShardVersions(catalog);
    const history = await historyReport(catalog, config);
    const target = Math.max(history.recordedVersion ?? 0, targetVersion(config));
    const layout = withEpoch(resolveLayout(info.layout), info.epochMs);
    const stats = new Map(
      await Promise.all(
        names.map(async (name) => [name, await shardStatsOn(primaryOf(name), map.shards, name)] as const),
      ),
    );
    const none = { rows: null, bytes: null, inserts: null, updates: null, deletes: null };
    const shards: ShardStatus[] = map.shards.map((s) => ({
      ...s,
      schemaVersion: versions.get(s.shard)?.schemaVersion ?? 0,
      lastError: versions.get(s.shard)?.lastError ?? null,
      ...(stats.get(s.server)?.get(s.schema) ?? (stats.get(s.server) ? ZERO : none)),
    }));
    const servers = Object.entries(config.servers).map(([name, url]) => ({
      name,
      url: describeUrl(url),
      shards: shards.filter((s) => s.server === name).length,
      reachable: primaryOf(name) !== undefined,
      nodes: nodes.get(name) ?? [],
    }));
    for (const s of shards) {
      if (!(s.server in config.servers))
        servers.push({ name: s.server, url: '(not in config)', shards: 0, reachable: false, nodes: [] });
    }
    const unlisted = servers.filter((s) => s.url === '(not in config)');
    for (const u of unlisted) u.shards = shards.filter((s) => s.server === u.name).length;
    const schemaVersions: Record<string, number> = {};
    for (const s of shards) schemaVersions[s.schemaVersion] = (schemaVersions[s.schemaVersion] ?? 0) + 1;

    const warnings: string[] = [];
    if (shards.length < info.logicalShards) {
      warnings.push(
        `${info.logicalShards - shards.length} of ${info.logicalShards} shards are not created yet; run cluster init again`,
      );
    }
    for (const d of history.differences) warnings.push(`config and cluster migrations differ: ${d.text}`);
    const behind = shards.filter((s) => s.schemaVersion < target).length;
    if (behind > 0)
      warnings.push(`${behind} shards are behind schema version ${target}; run cluster migrate`);
    const ahead = shards.filter((s) => s.schemaVersion > target).length;
    if (ahead > 0)
      warnings.push(
        `${ahead} shards are at a schema version above ${target}: the config lacks migrations they ran, and the cluster recorded no history of them`,
      );
    for (const s of servers.filter((x) => !x.reachable)) {
      const why = s.nodes.find((n) => n.error)?.error;
      warnings.push(why ? `server ${s.name} did not answer: ${why}` : `server ${s.name} is unreachable`);
    }
    for (const s of servers) {
      for (const n of s.nodes.filter((x) => s.reachable && !x.reachable))
        warnings.push(`server ${s.name}: node ${n.node} is unreachable`);
    }
    const moves = await readMoveStatus(catalog, map, urls, config.schemaPrefix);
    warnings.push(...moveWarnings(moves));
    const transactions = await readTransactionsStatus(
      config,
      servers.filter((x) => x.reachable && x.url !== '(not in config)').map((x) => x.name),
    );
    if (names.length > 1)
      for (const name of transactions.cannotTakePart)
        warnings.push(
          `server ${name} has max_prepared_transactions = 0: its shards cannot take part in transactions across servers`,
        );
    for (const g of transactions.inDoubt.filter((t) => t.ageMs >= TRANSACTION_DEFAULTS.inDoubtAfterMs))
      warnings.push(
        `in-doubt transaction ${g.gid} on server ${g.server} (${Math.round(g.ageMs / 1000)} s, decision: ${g.decision}); run cluster recover`,
      );
    // A role granted SELECT on the catalog's tables before this one existed cannot read it: said, not fatal.
    const lastPoint = await lastRestorePoint(catalog).catch((error: unknown) => {
      warnings.push(`cannot read the restore points: ${wrapPgError(error).message}`);
      return null;
    });
    if (lastPoint?.state === 'partial')
      warnings.push(
        `the latest restore point, ${lastPoint.name}, was not written on every server (${lastPoint.error}): never restore to it`,
      );
    // A role that may not read the table (made after its grants) sees no deadlocks rather than no status.
    const deadlocks = await readDeadlocks(catalog).catch(() => ({ lastDay: 0, kept: 0, latest: [] }));
    const adoption = await readAdoption(catalog);
    if (adoption?.lastError && adoption.phase !== 'done' && adoption.phase !== 'aborted')
      warnings.push(`the adoption of ${describeUrl(adoption.sourceUrl)} stopped: ${adoption.lastError}`);
    const overflow = layout.signedOverflowAt;
    if (overflow && overflow.getTime() - now < OVERFLOW_WARNING_YEARS * 365.25 * 86_400_000) {
      warnings.push(`ids of this layout and epoch stop fitting a signed bigint on ${overflow.toISOString()}`);
    }
    return {
      version: Number(map.version),
      logicalShards: info.logicalShards,
      mappedShards: shards.length,
      layout: layout.name,
      epoch: new Date(info.epochMs).toISOString(),
      signedOverflowAt: overflow ? overflow.toISOString() : null,
      exhaustsAt: layout.exhaustsAt.toISOString(),
      targetSchemaVersion: target,
      migrationDifferences: history.differences.map((d) => d.text),
      schemaVersions,
      servers,
      warnings,
      moves,
      shards,
      transactions,
      lastRestorePoint: lastPoint,
      deadlocks,
      ...(adoption
        ? {
            adoption: {
              phase: adoption.phase,
              source: describeUrl(adoption.sourceUrl),
              root: adoption.root,
              appliedLsn: adoption.appliedLsn,
              behindBytes: adoption.behindBytes === null ? null : Number(adoption.behindBytes),
              pauseMs: adoption.pauseMs,
              oldIdsBelow: adoption.oldIdsBelow.toString(),
              lastError: adoption.lastError,
            },
          }
        : {}),
    };
  } finally {
    await catalog.end().catch(() => {});
  }
}

/** A shard whose tables have no statistics yet (nothing written since the server started) has zero rows. */
const ZERO: ShardStats = { rows: 0, bytes: 0, inserts: 0, updates: 0, deletes: 0 };

/** The stats of one server's shards from its primary, or undefined when it does not answer. */
async function shardStatsOn(
  url: string | undefined,
  shards: readonly { server: string; schema: string }[],
  name: string,
): Promise<Map<string, ShardStats> | undefined> {
  const schemas = shards.filter((s) => s.server === name).map((s) => s.schema);
  if (!url || schemas.length === 0) return undefined;
  const client = await connect(url, { connectTimeoutMs: 3000, applicationName: 'shardflake status' }).catch(
    () => null,
  );
  if (!client) return undefined;
  try {
    return await readShardStats(client, schemas);
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => {});
  }
}

import { ShardflakeError } from '../errors.js';
import { resolveLayout, withEpoch } from '../ids/layout.js';
import { connect, describeUrl } from '../postgres/connect.js';
import { readClusterInfo, readShardMap, readShardVersions, type ShardState } from './catalog.js';
import { type ClusterConfig, targetVersion } from './config.js';

/**
 * `cluster status`: the map as the catalog holds it, shard counts per server, schema versions, and how long the
 * layout's ids keep fitting a signed bigint (with a warning when that date is near).
 */
export const OVERFLOW_WARNING_YEARS = 5;

export interface ShardStatus {
  shard: number;
  server: string;
  schema: string;
  state: ShardState;
  schemaVersion: number;
  lastError: string | null;
}

export interface ClusterStatus {
  /** Map version. */
  version: number;
  logicalShards: number;
  /** Shards in the map (fewer than logicalShards while init is unfinished). */
  mappedShards: number;
  layout: string;
  epoch: string;
  /** When ids stop fitting a signed 64-bit integer (null if the layout never uses the sign bit). */
  signedOverflowAt: string | null;
  /** When the layout's time field runs out. */
  exhaustsAt: string;
  targetSchemaVersion: number;
  /** Schema version → number of shards at it. */
  schemaVersions: Record<string, number>;
  servers: { name: string; url: string; shards: number; reachable: boolean }[];
  warnings: string[];
  shards: ShardStatus[];
}

export async function clusterStatus(config: ClusterConfig, now = Date.now()): Promise<ClusterStatus> {
  const catalog = await connect(config.servers[config.catalog] as string, {
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
    const layout = withEpoch(resolveLayout(info.layout), info.epochMs);
    const shards: ShardStatus[] = map.shards.map((s) => ({
      ...s,
      schemaVersion: versions.get(s.shard)?.schemaVersion ?? 0,
      lastError: versions.get(s.shard)?.lastError ?? null,
    }));
    const reachable = await Promise.all(
      Object.entries(config.servers).map(async ([name, url]) => {
        if (name === config.catalog) return true;
        const client = await connect(url, { connectTimeoutMs: 3000 }).catch(() => null);
        await client?.end().catch(() => {});
        return client !== null;
      }),
    );
    const servers = Object.entries(config.servers).map(([name, url], i) => ({
      name,
      url: describeUrl(url),
      shards: shards.filter((s) => s.server === name).length,
      reachable: reachable[i] as boolean,
    }));
    for (const s of shards) {
      if (!(s.server in config.servers))
        servers.push({ name: s.server, url: '(not in config)', shards: 0, reachable: false });
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
    const behind = shards.filter((s) => s.schemaVersion < targetVersion(config)).length;
    if (behind > 0)
      warnings.push(
        `${behind} shards are behind schema version ${targetVersion(config)}; run cluster migrate`,
      );
    for (const s of servers.filter((x) => !x.reachable)) warnings.push(`server ${s.name} is unreachable`);
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
      targetSchemaVersion: targetVersion(config),
      schemaVersions,
      servers,
      warnings,
      shards,
    };
  } finally {
    await catalog.end().catch(() => {});
  }
}

import type pg from 'pg';
import { redactSecrets, ShardflakeError } from '../errors.js';
import { connect } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import { readClusterInfo, readShardMap, readShardVersions } from './catalog.js';
import { type ClusterConfig, targetVersion } from './config.js';
import { closeAll, connectAll } from './connections.js';
import { MIGRATIONS_TABLE, shardMigrationSql } from './shard-ddl.js';

/**
 * `cluster migrate`: brings every logical shard to the config's last migration.
 *
 * Each shard is migrated in its own transaction on its own server: lock the shard's `_shardflake_migrations`
 * table, read which versions it has (the truth, which travels with the shard), run the pending statements and
 * record them, commit. A failing statement rolls the whole shard back to where it was; the other shards go on.
 * The catalog's copy of each shard's version (for `cluster status`) is written afterwards; a run killed in
 * between leaves it behind, and the next run reads the truth from the shard and just records it.
 * Shards in state `moving` are refused (DDL during a move would break its replication) and reported.
 */
export interface MigrateOptions {
  /** Parallel connections per server (default 2). */
  connectionsPerServer?: number;
  onProgress?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

export interface ShardFailure {
  shard: number;
  server: string;
  schema: string;
  /** The version the shard stays at. */
  version: number;
  error: string;
  sqlState?: string;
}

export interface MigrateResult {
  target: number;
  /** Shards this run moved forward. */
  migrated: number;
  /** Shards that were already at the target. */
  alreadyCurrent: number;
  failed: ShardFailure[];
  durationMs: number;
}

const DEFAULTS = { connectionsPerServer: 2 };

export async function migrateCluster(
  config: ClusterConfig,
  options: MigrateOptions = {},
): Promise<MigrateResult> {
  // Options left undefined (e.g. CLI flags not given) keep their defaults.
  const given = Object.fromEntries(
    Object.entries(options).filter(([, v]) => v !== undefined),
  ) as MigrateOptions;
  const opts = { ...DEFAULTS, ...given };
  const started = performance.now();
  const target = targetVersion(config);
  const clients = await connectAll(config, { applicationName: 'shardflake migrate' });
  const extra: pg.Client[] = [];
  try {
    const catalog = clients.get(config.catalog) as pg.Client;
    const info = await readClusterInfo(catalog);
    if (!info)
      throw new ShardflakeError(
        'INVALID_CONFIG',
        `no cluster on catalog server ${config.catalog}; run cluster init first`,
      );
    if (info.logicalShards !== config.logicalShards) {
      throw new ShardflakeError(
        'INVALID_CONFIG',
        `${config.source}: logicalShards is ${config.logicalShards} but the cluster has ${info.logicalShards}`,
      );
    }
    const map = await readShardMap(catalog);
    const versions = await readShardVersions(catalog);
    const failed: ShardFailure[] = [];
    const todo = new Map<string, { shard: number; schema: string }[]>();
    let alreadyCurrent = 0;
    for (const s of map.shards) {
      const known = versions.get(s.shard)?.schemaVersion ?? 0;
      if (known >= target) {
        alreadyCurrent++;
      } else if (s.state === 'moving') {
        failed.push({
          shard: s.shard,
          server: s.server,
          schema: s.schema,
          version: known,
          error: 'the shard is being moved; migrate again after the move',
        });
      } else {
        const list = todo.get(s.server) ?? [];
        list.push({ shard: s.shard, schema: s.schema });
        todo.set(s.server, list);
      }
    }
    const total = map.shards.length;
    let done = alreadyCurrent + failed.length;
    let migrated = 0;
    opts.onProgress?.(done, total);

    // Catalog bookkeeping is queued on the catalog's own connection, so shard work never waits on it.
    let catalogWrites = Promise.resolve();
    const record = (shard: number, version: number, error: string | null) => {
      catalogWrites = catalogWrites.then(async () => {
        await catalog.query(
          'UPDATE shardflake.shards SET schema_version = $2, last_error = $3 WHERE shard = $1',
          [shard, version, error],
        );
      });
    };

    const work = async (server: string, client: pg.Client, queue: { shard: number; schema: string }[]) => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        opts.signal?.throwIfAborted();
        const { shard, schema } = next;
        let version = versions.get(shard)?.schemaVersion ?? 0;
        try {
          const results = (await client.query(
            `BEGIN; SET LOCAL search_path TO ${quoteIdent(schema, 'schema')};
             LOCK TABLE ${MIGRATIONS_TABLE} IN EXCLUSIVE MODE;
             SELECT coalesce(max(version), 0)::int AS version FROM ${MIGRATIONS_TABLE}`,
          )) as unknown as pg.QueryResult[];
          version = ((results[results.length - 1] as pg.QueryResult).rows[0] as { version: number }).version;
          if (version < target) await client.query(`${shardMigrationSql(config, schema, version)}COMMIT;`);
          else await client.query('COMMIT');
          if (version < target) migrated++;
          else alreadyCurrent++;
          record(shard, target, null);
        } catch (error) {
          await client.query('ROLLBACK').catch(() => {});
          const e = error as { message?: string; code?: string };
          const message = redactSecrets(String(e.message ?? error));
          failed.push({ shard, server, schema, version, error: message, sqlState: e.code });
          record(shard, version, message);
        }
        done++;
        opts.onProgress?.(done, total);
      }
    };

    const workers: Promise<void>[] = [];
    for (const [server, queue] of todo) {
      const count = Math.min(opts.connectionsPerServer, queue.length);
      for (let i = 0; i < count; i++) {
        const c = await connect(config.servers[server] as string, { applicationName: 'shardflake migrate' });
        extra.push(c);
        workers.push(work(server, c, queue));
      }
    }
    const settled = await Promise.allSettled(workers);
    await catalogWrites;
    const stopped = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (stopped) throw stopped.reason;
    failed.sort((a, b) => a.shard - b.shard);
    return { target, migrated, alreadyCurrent, failed, durationMs: performance.now() - started };
  } finally {
    await Promise.all(extra.map((c) => c.end().catch(() => {})));
    await closeAll(clients);
  }
}

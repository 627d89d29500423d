/*
 * admin/: Operating a cluster's shape: `cluster init` (this file), the DDL of one shard, migrations (resumable,
 * with CONCURRENTLY builds), `cluster status` and `cluster verify` (which runs every folder's check).
 *
 * May import: errors, ids, postgres, config, topology, catalog, fence, recovery, lookups, reference.
 */

import type pg from 'pg';
import { installDeadlockLog } from '../catalog/deadlocks.js';
import { recordServers } from '../catalog/servers.js';
import {
  announceShards,
  installCatalog,
  readClusterInfo,
  readShardMap,
  recordOldIdsBelow,
  recordShards,
  rewriteClusterRowWhileNoShard,
  type ShardRecord,
  upgradeCatalog,
  writeClusterRow,
} from '../catalog/shards.js';
import { type ClusterConfig, MAX_LOGICAL_SHARDS, shardSchema, targetVersion } from '../config/config.js';
import { expectObject, expectOption, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { isFenced } from '../fence/fence.js';
import { recordLookupsAfterInit } from '../lookups/init.js';
import { wrapPgError } from '../postgres/connect.js';
import { installTransactions } from '../recovery/install.js';
import { installReference } from '../reference/install.js';
import { closeAll, connectAll, connectServer, type ServerClients } from '../topology/connections.js';
import { keepHistory } from './migrations.js';
import { LIST_SHARD_SCHEMAS_SQL, shardsCreationSql } from './shard-ddl.js';

/**
 * `cluster init`: creates the catalog and every logical shard, spread evenly over the servers.
 *
 * Speed (8192 shards on two servers): each server gets a few connections, each sending batches of many shards'
 * DDL as one multi-statement query in one transaction — one round trip and one commit (fsync) per batch instead
 * of per statement — with every function of the batch created before any statement that looks one up by name
 * (see `shardsCreationSql`), which keeps the cost per shard flat as the server fills up. A batch commits on its
 * server first and is then recorded in the catalog; a killed run loses at most the record of its in-flight
 * batches, and the next run finds those shards on their servers (their `_shardflake_migrations` table marks them
 * complete) and records them instead of creating them again.
 */
export interface InitOptions {
  /** Shards per transaction (default 64). */
  batchSize?: number;
  /** Parallel connections per server (default 2). */
  connectionsPerServer?: number;
  /** Called after each committed batch with the number of shards done (including ones done before). */
  onProgress?: (done: number, total: number) => void;
  /** Stops between batches; shards committed so far stay recorded and a rerun finishes the rest. */
  signal?: AbortSignal;
}

/** What `initCluster` did: the shards it created, found or recovered, per server, and how long it took. */
export interface InitResult {
  /** How many logical shards the cluster has (the config's `logicalShards`). */
  logicalShards: number;
  /** Shards created by this run. */
  created: number;
  /** Shards a previous run had created and recorded. */
  alreadyRecorded: number;
  /** Shards a killed run had created but not recorded, found on their servers and recorded now. */
  recovered: number;
  /** Shards the map places on each server after this run, every configured server listed (0 if none). */
  perServer: Record<string, number>;
  /** The map version after this run: raised once when it created or recovered shards, else unchanged. */
  mapVersion: bigint;
  /** How long the run took, in milliseconds. */
  durationMs: number;
}

const DEFAULTS = { batchSize: 64, connectionsPerServer: 2 };

/** Shard → server in contiguous, equal blocks (shards 0…N/K−1 on the first server, and so on). */
export function planPlacement(config: Pick<ClusterConfig, 'servers' | 'logicalShards'>): string[] {
  expectObject(config, 'planPlacement: config');
  const names = Object.keys(expectObject(config.servers, 'planPlacement: config.servers'));
  const shards = config.logicalShards;
  if (names.length === 0 || !Number.isSafeInteger(shards) || shards < 1 || shards > MAX_LOGICAL_SHARDS) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `planPlacement needs at least one server and 1 to ${MAX_LOGICAL_SHARDS} logical shards, not ${shown(shards)}`,
    );
  }
  return Array.from(
    { length: config.logicalShards },
    (_, shard) => names[Math.floor((shard * names.length) / config.logicalShards)] as string,
  );
}

/**
 * Writes the cluster row, or checks that an existing one matches the config. With `noShardYet` (no shard in the
 * catalog or on any server: a first init failed before making one), an existing row that differs is rewritten
 * from the config instead: the first run's choices made nothing yet.
 */
async function ensureClusterRow(
  catalog: pg.Client,
  config: ClusterConfig,
  noShardYet: boolean,
): Promise<void> {
  // The catalog DDL is idempotent but its ALTERs take exclusive locks: a rerun on an existing cluster skips it.
  const row = {
    logicalShards: config.logicalShards,
    epochMs: config.epoch,
    layout: config.layout.name,
    schemaPrefix: config.schemaPrefix,
  };
  let info = await readClusterInfo(catalog);
  if (!info) {
    await installCatalog(catalog);
    // Where routers record the deadlocks they break (a router also makes it when it is missing).
    await installDeadlockLog(catalog);
    await writeClusterRow(catalog, row);
    info = await readClusterInfo(catalog);
  } else {
    await upgradeCatalog(catalog);
    if (noShardYet && (await rewriteClusterRowWhileNoShard(catalog, row)))
      info = await readClusterInfo(catalog);
  }
  if (!info) throw new ShardflakeError('DATABASE_ERROR', 'the catalog has no cluster row after writing it');
  const mismatches: string[] = [];
  if (info.logicalShards !== config.logicalShards) mismatches.push(`logicalShards ${info.logicalShards}`);
  if (info.epochMs !== config.epoch) mismatches.push(`epoch ${new Date(info.epochMs).toISOString()}`);
  if (info.layout !== config.layout.name) mismatches.push(`layout ${info.layout}`);
  if (info.schemaPrefix !== config.schemaPrefix) mismatches.push(`schemaPrefix ${info.schemaPrefix}`);
  if (mismatches.length > 0) {
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `${config.source}: the catalog on server ${config.catalog} holds a cluster created with ${mismatches.join(', ')}; the config must match it`,
    );
  }
}

/** True when a server holds a schema named like a shard under `prefix`, complete or not. */
async function anyShardSchema(clients: ServerClients, prefix: string): Promise<boolean> {
  for (const client of clients.values()) {
    const { rows } = await client.query(LIST_SHARD_SCHEMAS_SQL, [prefix]).catch((e) => {
      throw wrapPgError(e);
    });
    if (rows.length > 0) return true;
  }
  return false;
}

/**
 * Creates the catalog and every logical shard (schema, generator, tables and migrations) on the config's servers,
 * after checking that every server answers. Idempotent: a rerun finishes a killed run and changes nothing on a
 * finished cluster.
 */
export async function initCluster(config: ClusterConfig, options: InitOptions = {}): Promise<InitResult> {
  // Options left undefined (e.g. CLI flags not given) keep their defaults.
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as InitOptions;
  const opts = { ...DEFAULTS, ...given };
  expectOption(given.batchSize, 'batchSize', 1);
  expectOption(given.connectionsPerServer, 'connectionsPerServer', 1);
  const started = performance.now();
  opts.signal?.throwIfAborted();
  // Every server must answer before anything is created anywhere.
  const clients = await connectAll(config, { applicationName: 'shardflake init' });
  const extra: pg.Client[] = [];
  try {
    const catalog = clients.get(config.catalog) as pg.Client;
    const schemaOf = (shard: number) => shardSchema(config, shard);

    // The catalog's placement, when a catalog exists (read only: nothing is created before every server is seen).
    // It wins over what the servers hold: after a move and before `cluster cleanup`, the moved shard's schema is
    // on both servers, and only the catalog knows which copy is live.
    const placed = new Map<number, string>();
    const info = await readClusterInfo(catalog);
    if (info) {
      for (const s of (await readShardMap(catalog)).shards) placed.set(s.shard, s.server);
    }

    // Look at every server before changing any: a schema with a shard's name that is not a complete shard would
    // make the run fail half-way, so it is refused up front.
    const found = new Map<number, string>();
    for (const [name, client] of clients) {
      const { rows } = await client.query(LIST_SHARD_SCHEMAS_SQL, [config.schemaPrefix]).catch((e) => {
        throw wrapPgError(e);
      });
      for (const row of rows as { schema: string; complete: boolean }[]) {
        const shard = Number(row.schema.slice(config.schemaPrefix.length));
        if (shard >= config.logicalShards) continue;
        // A copy on a server other than the catalog's is a move's business (an old fenced copy waiting for
        // cleanup, or a new copy still filling): init leaves it alone.
        const at = placed.get(shard);
        if (at !== undefined && at !== name) continue;
        if (!row.complete) {
          throw new ShardflakeError(
            'INVALID_CONFIG',
            `schema ${row.schema} already exists on server ${name} but is not a complete shardflake shard; drop it or choose another schemaPrefix`,
          );
        }
        if (at !== undefined) {
          found.set(shard, name);
          continue;
        }
        // Not in the catalog: a fenced copy is the old side of a move, never the live one.
        if (await isFenced(client, row.schema)) continue;
        const other = found.get(shard);
        if (other !== undefined) {
          throw new ShardflakeError(
            'INVALID_CONFIG',
            `shard ${shard} exists (unfenced) on both server ${other} and server ${name} and the catalog does not say which is live`,
          );
        }
        found.set(shard, name);
      }
    }

    // No shard anywhere yet (a first init that failed before making one, e.g. on a typo in a template): the
    // catalog's cluster row and history describe nothing that exists, so the config as it is now replaces them.
    // Schemas under the prefix the catalog recorded count too, when the config changes the prefix.
    const noShardYet =
      placed.size === 0 &&
      found.size === 0 &&
      (info === null ||
        info.schemaPrefix === config.schemaPrefix ||
        !(await anyShardSchema(clients, info.schemaPrefix)));
    await ensureClusterRow(catalog, config, noShardYet);
    // A bound given with the config (an adoption's, adopt/run.ts) is the cluster's before any shard gets its id rule.
    if (config.oldIdsBelow !== undefined && config.oldIdsBelow !== null)
      await recordOldIdsBelow(catalog, config.oldIdsBelow);
    // New shards are made from the history the catalog keeps (recording the config's new migrations first).
    config = (await keepHistory(catalog, config, { replaceWhileNoShard: noShardYet })).config;
    // Before any shard: a shard session may join against the reference tables from its first statement.
    await installReference(config, clients);
    await installTransactions(clients, config.catalog);
    await recordServers(catalog, config.nodes);
    const map = await readShardMap(catalog);
    const recorded = new Set(map.shards.map((s) => s.shard));
    for (const s of map.shards) {
      if (!(s.server in config.servers)) {
        throw new ShardflakeError(
          'UNKNOWN_SERVER',
          `the catalog places shard ${s.shard} on server ${s.server}, which the config does not define`,
        );
      }
    }
    const recovered: ShardRecord[] = [...found]
      .filter(([shard]) => !recorded.has(shard))
      .map(([shard, server]) => ({ shard, server, schema: schemaOf(shard), schemaVersion: 0 }));
    await recordShards(catalog, recovered);

    const placement = planPlacement(config);
    const todo = new Map<string, number[]>(Object.keys(config.servers).map((n) => [n, []]));
    for (let shard = 0; shard < config.logicalShards; shard++) {
      if (recorded.has(shard) || found.has(shard)) continue;
      todo.get(placement[shard] as string)?.push(shard);
    }
    const total = config.logicalShards;
    const pending = [...todo.values()].reduce((n, list) => n + list.length, 0);
    let done = total - pending;
    opts.onProgress?.(done, total);

    const batches = new Map<string, number[][]>();
    for (const [name, shards] of todo) {
      const list: number[][] = [];
      for (let i = 0; i < shards.length; i += opts.batchSize) list.push(shards.slice(i, i + opts.batchSize));
      batches.set(name, list);
    }
    // A catalog write after every batch would serialise the servers on one connection; writes are queued instead.
    let catalogWrites = Promise.resolve();
    const record = (records: ShardRecord[]) => {
      catalogWrites = catalogWrites.then(() => recordShards(catalog, records));
      return catalogWrites;
    };

    const createdOn = async (name: string, client: pg.Client, queue: number[][]) => {
      for (let batch = queue.shift(); batch; batch = queue.shift()) {
        opts.signal?.throwIfAborted();
        const sql = shardsCreationSql(
          config,
          batch.map((shard) => ({ shard, schema: schemaOf(shard) })),
        );
        try {
          // synchronous_commit off: a batch's commit does not wait for its WAL flush. A crash may lose the last
          // batches, which is harmless here: they were not recorded in the catalog yet and the rerun makes them.
          await client.query(`BEGIN;\nSET LOCAL synchronous_commit TO off;\n${sql}COMMIT;`);
        } catch (error) {
          await client.query('ROLLBACK').catch(() => {});
          const e = wrapPgError(error);
          throw new ShardflakeError(
            e.code,
            `creating shards ${batch[0]}–${batch[batch.length - 1]} on server ${name} failed: ${e.message}`,
            { sqlState: e.sqlState, detail: e.detail, cause: error },
          );
        }
        await record(
          batch.map((shard) => ({
            shard,
            server: name,
            schema: schemaOf(shard),
            schemaVersion: targetVersion(config),
          })),
        );
        done += batch.length;
        opts.onProgress?.(done, total);
      }
    };

    const workers: Promise<void>[] = [];
    for (const [name, queue] of batches) {
      const count = Math.min(opts.connectionsPerServer, queue.length);
      for (let i = 0; i < count; i++) {
        const c = await connectServer(config, name, { applicationName: 'shardflake init' });
        extra.push(c);
        const worker = createdOn(name, c, queue);
        // Handled now: a worker may fail (or see the abort) while the next server's connection is still being
        // opened, before allSettled below looks at it, which Node would report as an unhandled rejection.
        worker.catch(() => {});
        workers.push(worker);
      }
    }
    const settled = await Promise.allSettled(workers);
    await catalogWrites;
    const failure = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failure) throw failure.reason;

    await recordLookupsAfterInit(
      catalog,
      config,
      pending === total && recorded.size === 0 && recovered.length === 0,
    );
    // Shards created or recovered by this run become visible to routers together. A run that found everything in
    // place changes nothing, not even the map version (routers would re-read the map for nothing).
    // A run that stopped before this step left its shards unannounced: the rerun announces them.
    const mapVersion = (await announceShards(catalog)) ?? map.version;
    const perServer: Record<string, number> = Object.fromEntries(
      Object.keys(config.servers).map((n) => [n, 0]),
    );
    for (const s of (await readShardMap(catalog)).shards)
      perServer[s.server] = (perServer[s.server] ?? 0) + 1;
    return {
      logicalShards: total,
      created: total - recorded.size - recovered.length,
      alreadyRecorded: recorded.size,
      recovered: recovered.length,
      perServer,
      mapVersion,
      durationMs: performance.now() - started,
    };
  } finally {
    await Promise.all(extra.map((c) => c.end().catch(() => {})));
    await closeAll(clients as ServerClients);
  }
}

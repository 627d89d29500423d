import type pg from 'pg';
import {
  findPlacement,
  readClusterInfo,
  readShardMap,
  readShardVersions,
  recordShardVersion,
  upgradeCatalog,
} from '../catalog/shards.js';
import { type ClusterConfig, targetVersion } from '../config/config.js';
import { expectOption, shown } from '../errors/arguments.js';
import { redactSecrets, ShardflakeError } from '../errors/errors.js';
import { lockShardWaiting, unlockShard } from '../fence/shard-lock.js';
import { buildLookups, type LookupBuildReport } from '../lookups/build.js';
import { connect } from '../postgres/connect.js';
import {
  type CheckedTable,
  carriesRule,
  checkedTablesSql,
  type IdShardRule,
  idShardCheckSql,
  idShardRule,
  validateIdCheckSql,
} from '../postgres/id-shard-rule.js';
import { quoteLiteral } from '../postgres/identifier.js';
import { settlePreparedOnShards } from '../recovery/settle.js';
import { installReference, type ReferenceInstallResult } from '../reference/install.js';
import { closeAll, connectAll, connectServer, primaryUrl } from '../topology/connections.js';
import { applyConcurrentMigration, type IndexBuildEvent, Slots } from './migrate-concurrently.js';
import { keepHistory } from './migrations.js';
import { inSchema, MIGRATIONS_TABLE, shardMigrationSql } from './shard-ddl.js';

/** The shards of `shards` with a table the id rule applies to that does not carry it, validated, as `rule` says. */
async function shardsWithoutRule(
  clients: Map<string, pg.Client>,
  shards: readonly { shard: number; server: string; schema: string }[],
  rule: IdShardRule,
): Promise<Set<number>> {
  const missing = new Set<number>();
  for (const [server, client] of clients) {
    const here = shards.filter((s) => s.server === server);
    if (here.length === 0) continue;
    const shardOf = new Map(here.map((s) => [s.schema, s.shard]));
    const { rows } = await client.query(checkedTablesSql('$1::text[]'), [here.map((s) => s.schema)]);
    for (const table of rows as CheckedTable[]) {
      const shard = shardOf.get(table.schema) as number;
      if (!carriesRule(table, rule, shard)) missing.add(shard);
    }
  }
  return missing;
}

/**
 * Puts the id rule on a shard's tables (postgres/id-shard-rule.ts): added NOT VALID in one short transaction (its
 * lock is brief, but waits for no long transaction: 2 s at most, then the shard fails and a rerun tries again),
 * then each table validated on its own (a scan that blocks no writer). A table whose rows already break the rule
 * keeps it NOT VALID: new writes are checked, and `cluster verify` lists the old rows.
 */
async function applyIdRule(
  client: pg.Client,
  shard: number,
  schema: string,
  rule: IdShardRule,
): Promise<void> {
  await client.query(
    `BEGIN; SET LOCAL lock_timeout = '2s'; ${idShardCheckSql(schema, shard, rule, false)}; COMMIT;`,
  );
  const { rows } = await client.query(checkedTablesSql('$1::text[]'), [[schema]]);
  for (const table of rows as CheckedTable[]) {
    if (table.valid !== false) continue;
    await client.query(validateIdCheckSql(schema, table.name)).catch((error: unknown) => {
      if ((error as { code?: string }).code !== '23514') throw error;
    });
  }
}

/**
 * `cluster migrate`: brings every logical shard to the config's last migration.
 *
 * Each shard is migrated in its own transaction on its own server: lock the shard's `_shardflake_migrations`
 * table, read which versions it has (the truth, which travels with the shard), run the pending statements and
 * record them, commit. A failing statement rolls the whole shard back to where it was; the other shards go on.
 * The catalog's copy of each shard's version (for `cluster status`) is written afterwards; a run killed in
 * between leaves it behind, and the next run reads the truth from the shard and just records it.
 * Shards in state `moving` are refused (DDL during a move would break its replication) and reported.
 *
 * Moves and migrations exclude each other per shard with the move's advisory lock (`lockShard`): each shard's step
 * runs holding it and re-reads the shard's placement and state under it, so a move cannot start while the shard is
 * being migrated, a migration cannot run on a shard a move has locked (even in the moment before the move marks
 * it `moving`), and a shard moved since the map was read is migrated where it lives now.
 *
 * A migration of CREATE/DROP INDEX CONCURRENTLY statements (see migrate-concurrently.ts) cannot share the shard's
 * transaction, so a shard's pending migrations go in runs: the transactional ones up to the next concurrent one in
 * one transaction, the concurrent one alone outside any transaction and then its version row in a transaction of
 * its own, and so on. Index builds run at most one at a time per server (a build reads the whole table twice and
 * waits for every older transaction in the database; two on one server only compete) and on at most
 * `parallelBuilds` servers at once.
 */
export interface MigrateOptions {
  /** Parallel connections per server (default 2). */
  connectionsPerServer?: number;
  /** Called with the shards done so far and the total, at the start and after each shard. */
  onProgress?: (done: number, total: number) => void;
  /**
   * Stops the run before the next shard (and the lookups' backfill); shards done stay done, a rerun goes
   * on.
   */
  signal?: AbortSignal;
  /** How long a shard's step waits for its lock held by another migrate (default 10 000 ms). */
  shardLockWaitMs?: number;
  /** Servers building indexes CONCURRENTLY at the same time, one build each (default: all of them). */
  parallelBuilds?: number;
  /**
   * The share of each server's time its index builds may take, above 0 and at most 1 (default 1: one build after
   * another). After a build that took t ms, the server's next build starts t · (1 / buildShare − 1) ms later at the
   * earliest: 0.5 rests as long as each build took. A pace for the writers: a build takes a core and reads the
   * whole table, and with 0.5 the writers on that server have it to themselves half the time.
   */
  buildShare?: number;
  /** Called as each CONCURRENTLY statement starts, finishes, fails or is found already done. */
  onIndexBuild?: (event: IndexBuildEvent) => void;
  /** Lookups being built (see lookups/build.ts): the shards of a lookup whose backfill is done. */
  onLookupProgress?: (lookup: string, done: number, total: number) => void;
  /** Rows per batch of a lookup's backfill (default 1000). */
  lookupBatchSize?: number;
}

/** A shard whose migration failed: it stays at its previous version, with the error kept for `cluster status`. */
export interface ShardFailure {
  /** The logical shard that failed. */
  shard: number;
  /** The server the shard lives on. */
  server: string;
  /** The shard's schema on that server. */
  schema: string;
  /** The version the shard stays at. */
  version: number;
  /**
   * Why it failed: PostgreSQL's message (secrets redacted), or why the shard was refused (moving, locked).
   */
  error: string;
  /** PostgreSQL's SQLSTATE when the server raised the error; absent when shardflake refused the shard. */
  sqlState?: string;
}

/**
 * What `migrateCluster` did: the target version, the shards migrated, already current or failed, and the indexes it
 * rebuilt.
 */
export interface MigrateResult {
  /** The cluster's schema version after this run: its recorded history plus the config's new migrations. */
  target: number;
  /**
   * How the config's migrations differ from the history the cluster keeps, when they differ in a way that is not
   * refused (a config that lacks recorded migrations, a renamed one); one sentence each.
   */
  differences: string[];
  /** Shards this run moved forward. */
  migrated: number;
  /** Shards that were already at the target. */
  alreadyCurrent: number;
  /** Shards whose migration failed this run, each left at its previous version; empty on success. */
  failed: ShardFailure[];
  /** Indexes that an earlier build had left invalid, dropped and built again by this run. */
  rebuiltIndexes: {
    /** The logical shard the index belongs to. */
    shard: number;
    /** The server the shard lives on. */
    server: string;
    /** The index's name inside the shard's schema. */
    index: string;
  }[];
  /** What happened to the reference tables (reference/install.ts). */
  reference: ReferenceInstallResult;
  /** The config's lookups: built by this run, or found built (empty when a shard failed to migrate). */
  lookups: LookupBuildReport[];
  /** How long the run took, in milliseconds. */
  durationMs: number;
}

const DEFAULTS = {
  connectionsPerServer: 2,
  shardLockWaitMs: 10_000,
  parallelBuilds: Number.POSITIVE_INFINITY,
  buildShare: 1,
};

/** The shard's applied version, read under an exclusive lock on its bookkeeping table; leaves the transaction open. */
const READ_VERSION_SQL = (schema: string) => `BEGIN; ${inSchema(schema)};
  LOCK TABLE ${MIGRATIONS_TABLE} IN EXCLUSIVE MODE;
  SELECT coalesce(max(version), 0)::int AS version FROM ${MIGRATIONS_TABLE}`;

async function readVersionLocked(client: pg.Client, schema: string): Promise<number> {
  const results = (await client.query(READ_VERSION_SQL(schema))) as unknown as pg.QueryResult[];
  return ((results[results.length - 1] as pg.QueryResult).rows[0] as { version: number }).version;
}

const MOVING = 'the shard is being moved; migrate again after the move';

/**
 * Brings every shard to the config's last migration, each shard in its own transaction (index builds CONCURRENTLY
 * outside one), in parallel per server; a failed shard rolls back whole and the others go on.
 */
export async function migrateCluster(
  config: ClusterConfig,
  options: MigrateOptions = {},
): Promise<MigrateResult> {
  // Options left undefined (e.g. CLI flags not given) keep their defaults.
  const given = Object.fromEntries(
    Object.entries(options).filter(([, v]) => v !== undefined),
  ) as MigrateOptions;
  const opts = { ...DEFAULTS, ...given };
  expectOption(given.connectionsPerServer, 'connectionsPerServer', 1);
  expectOption(given.shardLockWaitMs, 'shardLockWaitMs', 0);
  expectOption(given.parallelBuilds, 'parallelBuilds', 1);
  if (
    given.buildShare !== undefined &&
    !(typeof given.buildShare === 'number' && given.buildShare > 0 && given.buildShare <= 1)
  )
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `buildShare must be a number above 0 and at most 1 (the share of a server's time its index builds may take), not ${shown(given.buildShare)}`,
    );
  const started = performance.now();
  let target = targetVersion(config);
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
    // A catalog made by an older shardflake gets the catalog DDL it lacks (catalog/shards.ts, CATALOG_SQL_VERSION).
    await upgradeCatalog(catalog);
    // The history the catalog keeps: the config's new migrations are recorded before any shard runs them, a
    // config that contradicts it is refused, and one that lacks recorded migrations works from the catalog's SQL.
    const kept = await keepHistory(catalog, config);
    config = kept.config;
    target = targetVersion(config);
    // Reference tables first (every server, or none: see reference/install.ts), then the shards.
    const reference = await installReference(config, clients);
    const map = await readShardMap(catalog);
    const versions = await readShardVersions(catalog);
    // Shards whose tables lack the id rule as the cluster has it (a cluster made before it existed, a table a
    // migration added, an old-id bound recorded since): visited even when their schema is current.
    const rule = idShardRule(config.layout, config.oldIdsBelow ?? null);
    const needsRule = await shardsWithoutRule(clients, map.shards, rule);
    const failed: ShardFailure[] = [];
    const todo = new Map<string, { shard: number; schema: string }[]>();
    let alreadyCurrent = 0;
    const ahead = new Map<number, number>();
    for (const s of map.shards) {
      const known = versions.get(s.shard)?.schemaVersion ?? 0;
      if (known === target && (!needsRule.has(s.shard) || s.state === 'moving')) {
        // A moving shard's new copy is made with the rule; the old one is dropped by cleanup.
        alreadyCurrent++;
      } else if (known > target) {
        // Only a cluster whose history was never recorded (made before it was kept) can get here: its shards ran
        // migrations the config no longer lists, and nothing knows their SQL. Said, never called current.
        ahead.set(known, (ahead.get(known) ?? 0) + 1);
      } else if (s.state === 'moving') {
        failed.push({
          shard: s.shard,
          server: s.server,
          schema: s.schema,
          version: known,
          error: MOVING,
        });
      } else {
        const list = todo.get(s.server) ?? [];
        list.push({ shard: s.shard, schema: s.schema });
        todo.set(s.server, list);
      }
    }
    const total = map.shards.length;
    let done = alreadyCurrent + failed.length + [...ahead.values()].reduce((a, b) => a + b, 0);
    let migrated = 0;
    const rebuiltIndexes: MigrateResult['rebuiltIndexes'] = [];
    opts.onProgress?.(done, total);
    const allBuilds = new Slots(Math.max(1, opts.parallelBuilds));
    const serverBuilds = new Map<string, Slots>();
    const buildSlot = <T>(server: string, work: () => Promise<T>): Promise<T> => {
      let slots = serverBuilds.get(server);
      if (!slots) {
        slots = new Slots(1);
        serverBuilds.set(server, slots);
      }
      // Always the server's slot first, then a global one: one order, so no two workers wait on each other. The
      // server's slot rests after the build (buildShare); the global one is free at once for another server.
      let builtMs = 0;
      const timed = async () => {
        const at = performance.now();
        try {
          return await work();
        } finally {
          builtMs = performance.now() - at;
        }
      };
      return slots.run(
        () => allBuilds.run(timed),
        () => builtMs * (1 / opts.buildShare - 1),
      );
    };
    const onIndexBuild = (event: IndexBuildEvent) => {
      if (event.rebuilt && event.phase === 'finished') rebuiltIndexes.push({ ...event });
      opts.onIndexBuild?.(event);
    };

    // Catalog bookkeeping is queued on the catalog's own connection, so shard work never waits on it.
    let catalogWrites = Promise.resolve();
    const record = (shard: number, version: number, error: string | null) => {
      catalogWrites = catalogWrites.then(async () => {
        await recordShardVersion(catalog, shard, version, error);
      });
    };

    const catalogUrl = await primaryUrl(config, config.catalog);
    const work = async (home: string, queue: { shard: number; schema: string }[]) => {
      // This worker's connections: its catalog connection (holds the shard locks) and one per server it works on
      // (normally only its home server; another one when a shard moved away since the map was read).
      const lock = await connect(catalogUrl, { applicationName: 'shardflake migrate lock' });
      extra.push(lock);
      await lock.query(`SET lock_timeout = ${Math.max(1, Math.round(opts.shardLockWaitMs))}`);
      const clients = new Map<string, pg.Client>();
      const clientFor = async (server: string) => {
        let client = clients.get(server);
        if (!client) {
          client = await connectServer(config, server, { applicationName: 'shardflake migrate' });
          extra.push(client);
          clients.set(server, client);
        }
        return client;
      };
      for (let next = queue.shift(); next; next = queue.shift()) {
        opts.signal?.throwIfAborted();
        const { shard, schema } = next;
        let server = home;
        let version = versions.get(shard)?.schemaVersion ?? 0;
        const refused = await lockShardWaiting(lock, shard);
        if (refused) {
          failed.push({ shard, server, schema, version, error: refused });
          done++;
          opts.onProgress?.(done, total);
          continue;
        }
        try {
          // Under the lock: where the shard lives now, and whether a move left it `moving` (a crashed one).
          const placed = await findPlacement(lock, shard);
          if (placed) server = placed.server;
          if (placed?.state === 'moving') {
            failed.push({ shard, server, schema, version, error: MOVING });
          } else {
            const client = await clientFor(server);
            let found: number | undefined;
            try {
              // Runs of migrations until the shard is current: each run commits (and records itself) on its own.
              for (;;) {
                version = await readVersionLocked(client, schema);
                found ??= version;
                const next = config.migrations.find((m) => m.version > version);
                if (!next) {
                  await client.query('COMMIT');
                  break;
                }
                if (!next.concurrent) {
                  const upTo = config.migrations.find((m) => m.version > version && m.concurrent);
                  const last = upTo ? upTo.version - 1 : target;
                  await client.query(`${shardMigrationSql(config, schema, version, last)}COMMIT;`);
                  continue;
                }
                // No transaction may stay open here: a CONCURRENTLY build waits for every older one on the server.
                await client.query('COMMIT');
                const where = { shard, server, schema };
                await buildSlot(server, () => applyConcurrentMigration(client, where, next, onIndexBuild));
                await client.query(
                  `${READ_VERSION_SQL(schema)};
                   INSERT INTO ${MIGRATIONS_TABLE} (version, name) VALUES (${next.version}, ${quoteLiteral(next.name)});
                   COMMIT`,
                );
              }
              await applyIdRule(client, shard, schema, rule);
              if ((found ?? target) < target) migrated++;
              else alreadyCurrent++;
              record(shard, target, null);
            } catch (error) {
              await client.query('ROLLBACK').catch(() => {});
              const e = error as { message?: string; code?: string };
              const message = redactSecrets(String(e.message ?? error));
              // A pg error's code is its SQLSTATE; a ShardflakeError's code is not, its sqlState is.
              const sqlState = error instanceof ShardflakeError ? error.sqlState : e.code;
              failed.push({ shard, server, schema, version, error: message, sqlState });
              record(shard, version, message);
              // A connection the server closed (a terminated build) is useless for the next shard: open a new one.
              const alive = await client.query('SELECT 1').then(
                () => true,
                () => false,
              );
              if (!alive) {
                clients.delete(server);
                await client.end().catch(() => {});
              }
            }
          }
        } finally {
          await unlockShard(lock, shard);
        }
        done++;
        opts.onProgress?.(done, total);
      }
    };

    const workers: Promise<void>[] = [];
    // DDL waits for the locks of prepared transactions: in-doubt ones on these shards are settled first, by their
    // decision (recovery/settle.ts); one prepared later is settled by the routers' recovery within seconds.
    for (const [server, queue] of todo)
      await settlePreparedOnShards(
        config,
        server,
        queue.map((q) => q.schema),
        { failWith: 'MIGRATION_FAILED' },
      );
    for (const [server, queue] of todo) {
      const count = Math.min(opts.connectionsPerServer, queue.length);
      for (let i = 0; i < count; i++) workers.push(work(server, queue));
    }
    const settled = await Promise.allSettled(workers);
    await catalogWrites;
    const stopped = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (stopped) throw stopped.reason;
    failed.sort((a, b) => a.shard - b.shard);
    // Lookups are built once every shard has its columns (a lookup may be on a column a migration adds).
    const lookups =
      failed.length === 0
        ? await buildLookups(config, {
            batchSize: opts.lookupBatchSize,
            onProgress: opts.onLookupProgress,
            signal: opts.signal,
            shardLockWaitMs: opts.shardLockWaitMs,
          })
        : [];
    return {
      target,
      differences: [
        ...kept.differences.map((d) => d.text),
        ...[...ahead].map(
          ([version, count]) =>
            `${count} shard${count === 1 ? ' is' : 's are'} at schema version ${version}, above the config's ${target}: the config lacks migrations ${target + 1}–${version}, which the cluster never recorded (it predates kept histories); add them to the config`,
        ),
      ],
      migrated,
      alreadyCurrent,
      failed,
      rebuiltIndexes,
      reference,
      lookups,
      durationMs: performance.now() - started,
    };
  } finally {
    await Promise.all(extra.map((c) => c.end().catch(() => {})));
    await closeAll(clients);
  }
}

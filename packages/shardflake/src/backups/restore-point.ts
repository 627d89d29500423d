/*
 * backups/: Restoring a cluster: a named restore point on every server at one logical moment (this file), and one
 * shard's rows brought back from a server restored beside the cluster (restore-shard.ts).
 *
 * May import: errors, postgres, config, topology, catalog, fence, move.
 */
import type pg from 'pg';
import {
  findRestorePoint,
  installRestorePoints,
  lockOutDecisions,
  type RestorePointRecord,
  recordRestorePoint,
  releaseRestorePoint,
  reserveRestorePoint,
} from '../catalog/restore-points.js';
import { readShardMap } from '../catalog/shards.js';
import { catalogHasCluster } from '../catalog/transactions.js';
import type { ClusterConfig } from '../config/config.js';
import { expectKind, expectOption, optionsObject } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { closeAll, primaryUrl, type ServerClients } from '../topology/connections.js';

/**
 * A restore point of the cluster: `pg_create_restore_point(name)` on every server's primary, at one logical moment,
 * so that restoring every server to it (`recovery_target_name`) leaves no transaction across servers half-applied.
 *
 * Why "the same time on the clock" is not enough: a two-phase commit (transactions/cross.ts) commits its decision
 * on one server D (the last agent's COMMIT, holding the decision row) and its other parts on the others P, in order:
 * PREPARE on every P, then the decision on D, then COMMIT PREPARED on every P. Points written a moment apart can
 * fall on both sides of that: D's point before the decision and P's after its COMMIT PREPARED (P keeps its part,
 * D loses its part and the decision: half-applied), or D's after the decision and P's before its PREPARE (P's part
 * was an open transaction there, gone after the restore: half-applied again).
 *
 * The rule, as Citus's citus_create_restore_point: cross-server decisions are held off while the points are
 * written. One advisory key, the same on every server (catalog/restore-points.ts):
 * - a decision takes it SHARED on its decision server, inside the transaction whose COMMIT is the decision — the
 *   decision row's INSERT takes it (so it is held from step 2 of cross.ts to the COMMIT of step 3); a move's
 *   catalog switch takes it on the catalog, inside the switch's transaction; deleting an old decision row takes it
 *   too (see below). Transactions inside one server take nothing and never wait.
 * - a restore point takes it EXCLUSIVE on every server (each in a transaction of its own), and only once it holds it
 *   everywhere writes the point on every server, then COMMITs, which releases it.
 *
 * Proof that every cross-server transaction T is wholly in or wholly out of the restored cluster. Let W be the
 * moment the restore point holds the lock on every server; every point is written after W and before the release
 * R. T's decision transaction on D holds the lock shared, so it either committed before the restore point's lock
 * on D was granted, or began waiting for the lock after that — when it waits until R.
 * - Committed before: T's decision commit record is in D's WAL before D's point. Each PREPARE of T was
 *   acknowledged before the decision COMMIT was sent, so it is in P's WAL before W, hence before P's point: every
 *   restored P holds T's part, prepared or committed, and recovery (`cluster recover`, or any router) commits the
 *   prepared ones by D's decision row, which the restored D has. T is in, whole.
 * - Decided after R: D's point precedes T's decision, so the restored D has neither T's decision row nor its part
 *   (the last agent's transaction was still open). Every COMMIT PREPARED of T follows the decision, so follows R,
 *   so follows every P's point: a restored P holds T's part prepared at most, with no decision row on D, and
 *   recovery rolls it back. T is out, whole.
 * Recovery's own writes need no lock: committing a prepared part whose decision row exists changes no decision,
 * and an `abort` tombstone is only ever written for a transaction that committed nowhere. Deleting an old decision
 * row does need it: recovery deletes a row only after every part was settled, and a restore could otherwise keep a
 * part prepared on P (P's point before its COMMIT PREPARED) while D's point follows the deletion. With the lock, a
 * deletion before D's point began before W, so the parts it waited for were settled before every point.
 *
 * A move's switch is the same shape: the source's fence (committed on the source) and the target's copy precede
 * the catalog transaction that names the target. Switched before the lock was granted on the catalog: the fence
 * and the copy precede W, so precede every point; the restored map names the target, which holds every row. After
 * R: the restored map names the source, which holds every row (fenced or not); the move is unfinished, and a rerun
 * or `cluster cleanup` settles it. Nothing written through a router reaches the target before the switch.
 *
 * The pause: commits that decide across servers wait from the moment the exclusive request is queued (a new shared
 * request queues behind it) until R — the wait for decisions already holding the lock (bounded by `lockTimeoutMs`
 * on every server at once, then the whole attempt is given back and retried after a jittered delay, so neither a
 * long decision nor a second restore point running at once can hold commits for longer) plus one write of each
 * point, in parallel. The locks are requested on every server at once rather than in a fixed order: the pause is
 * the longest wait, not the sum, and two restore points that meet end each other's wait by the same timeout.
 */
/** Options of `createRestorePoint`. */
export interface RestorePointOptions {
  /**
   * How long each attempt waits, on every server at once, for decisions that hold the lock to commit (default 50
   * ms). Cross-server commits wait at most about this long, plus the writing of the points.
   */
  lockTimeoutMs?: number;
  /** Attempts before giving up with RESTORE_POINT_FAILED (default 20). */
  attempts?: number;
  /** Test hook: runs while every server's lock is held, before any point is written. */
  onLocked?: () => Promise<void>;
}

/** The defaults of `RestorePointOptions`. */
export const RESTORE_POINT_DEFAULTS = {
  /** How long each attempt waits for decisions holding the lock, in ms. */
  lockTimeoutMs: 50,
  /** Attempts before RESTORE_POINT_FAILED. */
  attempts: 20,
};

/** What `createRestorePoint` wrote. */
export interface RestorePoint {
  /** The name given, as `recovery_target_name` will name it. */
  name: string;
  /** When it was recorded as taken (the catalog's clock, ISO 8601). */
  takenAt: string;
  /** Each server's LSN of the point, in config order. */
  servers: {
    /** The server's name in the config. */
    server: string;
    /** Where its point is in its WAL (`pg_create_restore_point`'s answer). */
    lsn: string;
  }[];
  /** How long cross-server commits were held off: from the exclusive requests to their release, in ms. */
  heldMs: number;
  /** Attempts it took (a decision that held the lock past `lockTimeoutMs` costs one). */
  attempts: number;
  /** Facts worth knowing: a server that archives no WAL (its point is useless for a restore from archive). */
  warnings: string[];
}

/** Longest name PostgreSQL takes for a restore point (MAXFNAMELEN - 1). */
const MAX_NAME = 63;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;

/** Refuses a name a recovery_target_name line could not carry plainly. */
export function checkRestorePointName(name: unknown): string {
  if (typeof name !== 'string' || name.length > MAX_NAME || !NAME.test(name))
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `a restore point name is 1 to ${MAX_NAME} letters, digits, '.', '_', ':' or '-', starting with a letter or digit (not ${JSON.stringify(name)})`,
    );
  return name;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `shardflake cluster restore-point`: see the argument above. */
export async function createRestorePoint(
  config: ClusterConfig,
  name: string,
  options: RestorePointOptions = {},
): Promise<RestorePoint> {
  checkRestorePointName(name);
  optionsObject(options, 'createRestorePoint options');
  expectKind(options.onLocked, 'onLocked', 'function');
  const lockTimeoutMs =
    expectOption(options.lockTimeoutMs, 'lockTimeoutMs', 1) ?? RESTORE_POINT_DEFAULTS.lockTimeoutMs;
  const attempts = expectOption(options.attempts, 'attempts', 1) ?? RESTORE_POINT_DEFAULTS.attempts;
  const servers = Object.keys(config.servers);
  const clients = await connectPrimaries(config, servers);
  try {
    const warnings = await checkServers(clients, servers);
    const catalog = clients.get(config.catalog) as pg.Client;
    await checkCatalog(catalog, config);
    await installRestorePoints(catalog);
    const earlier = await findRestorePoint(catalog, name);
    if (earlier || !(await reserveRestorePoint(catalog, name)))
      throw nameTaken(name, earlier ?? (await findRestorePoint(catalog, name)));

    let locked: { attempt: number; since: number };
    try {
      locked = await lockEverywhere(clients, servers, lockTimeoutMs, attempts);
    } catch (error) {
      await releaseRestorePoint(catalog, name).catch(() => {});
      throw error;
    }
    let lsns: Record<string, string> = {};
    let failures: { server: string; error: ShardflakeError }[] = [];
    let heldMs: number;
    try {
      await options.onLocked?.().catch(async (error: unknown) => {
        await releaseRestorePoint(catalog, name).catch(() => {});
        throw error;
      });
      ({ lsns, failures } = await writePoints(clients, servers, name));
    } finally {
      // COMMIT releases the lock (a server whose write failed has an aborted transaction: COMMIT rolls it back).
      await Promise.all(servers.map((s) => (clients.get(s) as pg.Client).query('COMMIT').catch(() => {})));
      heldMs = Math.round((performance.now() - locked.since) * 10) / 10;
    }
    if (Object.keys(lsns).length === 0) {
      await releaseRestorePoint(catalog, name).catch(() => {});
      const first = failures[0] as { server: string; error: ShardflakeError };
      throw new ShardflakeError(
        'RESTORE_POINT_FAILED',
        `server ${first.server} refused the restore point (${first.error.message}); nothing was written`,
        { sqlState: first.error.sqlState, cause: first.error },
      );
    }
    if (failures.length > 0) {
      const written = servers.filter((s) => s in lsns);
      const reason = failures.map((f) => `server ${f.server}: ${f.error.message}`).join('; ');
      await recordRestorePoint(catalog, name, { lsns, heldMs, error: reason }).catch(() => {});
      throw new ShardflakeError(
        'RESTORE_POINT_FAILED',
        `restore point ${name} was written on ${written.join(', ')} but not on ${failures.map((f) => f.server).join(', ')} (${reason}): do not restore to ${name}, its servers would not stop at one moment; take a new restore point under another name`,
      );
    }
    const record = await recordRestorePoint(catalog, name, { lsns, heldMs }).catch((error: unknown) => {
      const e = wrapPgError(error);
      throw new ShardflakeError(
        'RESTORE_POINT_FAILED',
        `restore point ${name} was written on every server (${servers.map((s) => `${s} ${lsns[s]}`).join(', ')}) but the catalog did not record it (${e.message}); it can be restored to, and the catalog lists it as taking`,
        { sqlState: e.sqlState, cause: error },
      );
    });
    return {
      name,
      takenAt: record.takenAt as string,
      servers: servers.map((server) => ({ server, lsn: lsns[server] as string })),
      heldMs,
      attempts: locked.attempt,
      warnings,
    };
  } finally {
    await closeAll(clients);
  }
}

/**
 * A client on every server's primary, or none: a server whose primary does not answer is refused by name before
 * anything is written. Replicas need not answer (a restore point is written on primaries only).
 */
async function connectPrimaries(config: ClusterConfig, servers: readonly string[]): Promise<ServerClients> {
  const clients: ServerClients = new Map();
  const settled = await Promise.allSettled(
    servers.map(async (server) => {
      const url = await primaryUrl(config, server, { connectTimeoutMs: 5000, requireAll: false });
      clients.set(
        server,
        await connect(url, { applicationName: 'shardflake restore-point', connectTimeoutMs: 5000 }),
      );
    }),
  );
  const failedAt = settled.findIndex((r) => r.status === 'rejected');
  if (failedAt === -1) return clients;
  await closeAll(clients);
  const error = (settled[failedAt] as PromiseRejectedResult).reason;
  const e = wrapPgError(error);
  const server = servers[failedAt] as string;
  // The topology's messages already name their server.
  const message = e.message.startsWith(`server ${server}`) ? e.message : `server ${server}: ${e.message}`;
  throw new ShardflakeError(e.code, `${message}; no restore point was written`, {
    sqlState: e.sqlState,
    cause: error,
  });
}

function nameTaken(name: string, earlier: RestorePointRecord | null): ShardflakeError {
  const when = earlier ? ` (${earlier.state}, started ${earlier.startedAt})` : '';
  return new ShardflakeError(
    'RESTORE_POINT_EXISTS',
    `restore point ${name} was taken before${when}; a name means one moment, choose another`,
  );
}

/**
 * What must hold on every server before anything is written: a primary (connectAll checked), WAL that carries a
 * restore point, and a role allowed to write one. A server that archives no WAL only gets a warning: its WAL may be
 * kept by other means (pg_receivewal).
 */
async function checkServers(clients: ServerClients, servers: readonly string[]): Promise<string[]> {
  const checks = await Promise.all(
    servers.map(async (server) => {
      const { rows } = await (clients.get(server) as pg.Client)
        .query(
          `SELECT current_setting('wal_level') AS wal_level, current_setting('archive_mode') AS archive_mode,
                  has_function_privilege('pg_catalog.pg_create_restore_point(text)', 'EXECUTE') AS allowed`,
        )
        .catch((error: unknown) => {
          throw new ShardflakeError(
            wrapPgError(error).code,
            `server ${server}: ${wrapPgError(error).message}`,
            {
              cause: error,
            },
          );
        });
      return { server, ...(rows[0] as { wal_level: string; archive_mode: string; allowed: boolean }) };
    }),
  );
  for (const c of checks) {
    if (c.wal_level === 'minimal')
      throw new ShardflakeError(
        'NOT_SUPPORTED',
        `server ${c.server} runs with wal_level = minimal, which cannot carry a restore point (set replica or logical); no restore point was written`,
      );
    if (!c.allowed)
      throw new ShardflakeError(
        'INSUFFICIENT_PRIVILEGE',
        `server ${c.server}: the role may not run pg_create_restore_point (a superuser, or GRANT EXECUTE ON FUNCTION pg_create_restore_point(text) TO the role); no restore point was written`,
      );
  }
  return checks
    .filter((c) => c.archive_mode === 'off')
    .map(
      (c) =>
        `server ${c.server} has archive_mode = off: a restore to this point needs its WAL kept some other way (pg_receivewal)`,
    );
}

/** The catalog holds a cluster, and its map places no shard on a server the config does not list. */
async function checkCatalog(catalog: pg.Client, config: ClusterConfig): Promise<void> {
  if (!(await catalogHasCluster(catalog)))
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `the catalog on server ${config.catalog} holds no cluster; run cluster init first`,
    );
  const elsewhere = [...new Set((await readShardMap(catalog)).shards.map((s) => s.server))].filter(
    (s) => !(s in config.servers),
  );
  if (elsewhere.length > 0)
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `the catalog places shards on server ${elsewhere.join(', ')}, which the config does not list: a restore point must be written on every server; add it to the config`,
    );
}

/**
 * The exclusive lock on every server at once, each in a transaction of its own; an attempt that times out
 * anywhere gives every lock back and waits a jittered moment before the next one.
 */
async function lockEverywhere(
  clients: ServerClients,
  servers: readonly string[],
  lockTimeoutMs: number,
  attempts: number,
): Promise<{ attempt: number; since: number }> {
  for (let attempt = 1; ; attempt++) {
    const since = performance.now();
    const results = await Promise.allSettled(
      servers.map(async (server) => {
        await lockOutDecisions(clients.get(server) as pg.Client, lockTimeoutMs);
      }),
    );
    const failed = results.findIndex((r) => r.status === 'rejected');
    if (failed === -1) return { attempt, since };
    await Promise.all(servers.map((s) => (clients.get(s) as pg.Client).query('ROLLBACK').catch(() => {})));
    const error = (results[failed] as PromiseRejectedResult).reason;
    const server = servers[failed] as string;
    if ((error as { code?: string }).code !== '55P03') {
      const e = wrapPgError(error);
      throw new ShardflakeError(e.code, `server ${server}: ${e.message}; no restore point was written`, {
        sqlState: e.sqlState,
        cause: error,
      });
    }
    if (attempt >= attempts)
      throw new ShardflakeError(
        'RESTORE_POINT_FAILED',
        `cross-server commits on server ${server} kept deciding for longer than ${lockTimeoutMs} ms in each of ${attempts} attempts; no restore point was written (try again, or allow a longer lock timeout)`,
      );
    await sleep(lockTimeoutMs * (0.5 + Math.random()));
  }
}

/** `pg_create_restore_point` on every server at once; each server's LSN, or why it failed. */
async function writePoints(
  clients: ServerClients,
  servers: readonly string[],
  name: string,
): Promise<{ lsns: Record<string, string>; failures: { server: string; error: ShardflakeError }[] }> {
  const lsns: Record<string, string> = {};
  const failures: { server: string; error: ShardflakeError }[] = [];
  await Promise.all(
    servers.map(async (server) => {
      try {
        const { rows } = await (clients.get(server) as pg.Client).query(
          'SELECT pg_catalog.pg_create_restore_point($1)::text AS lsn',
          [name],
        );
        lsns[server] = (rows[0] as { lsn: string }).lsn;
      } catch (error) {
        failures.push({ server, error: wrapPgError(error) });
      }
    }),
  );
  return { lsns, failures };
}

/*
 * reference/: Reference tables: one copy on every server, created and migrated here, filled before a shard moves
 * to a new server, written atomically everywhere (write.ts, `router.withReference`), and compared by the verify
 * check.
 *
 * May import: errors, postgres, config, topology, catalog, telemetry, recovery, routing, transactions.
 */
import type pg from 'pg';
import type { ClusterConfig } from '../config/config.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { settlePreparedOnShards } from '../recovery/settle.js';
import { fillCopy } from './copy.js';
import { serverOrder } from './order.js';
import { recordCopies } from './servers.js';
import {
  DIGEST_ALL,
  MIGRATIONS_TABLE,
  REFERENCE_SQL_VERSION,
  referenceChangeSql,
  referenceSchemaSql,
  referenceUpgradeSql,
  STATE_TABLE,
  TABLES_TABLE,
} from './sql.js';
import { hasReference, isCurrent, type ReferenceState, readReferenceState } from './state.js';

/**
 * Creating and changing the reference tables on every server (`cluster init` and `cluster migrate` call
 * `installReference`; a move calls it for its target through before-move.ts).
 *
 * Ordering. The servers are changed one after the other in server order (order.ts), each in a transaction that
 * stays open until every server's change has run; then all commit, in the same order. A statement that fails on any
 * server rolls every server back, so a bad migration changes nothing anywhere. The commits are separate: a crash
 * between two of them leaves some servers a version ahead; the next `cluster migrate` brings the others up (each
 * server records the versions it applied, under an exclusive lock, so nothing runs twice) and `cluster verify`
 * reports the difference meanwhile. Going through the servers in server order, as `withReference` does, means a
 * migration and a write wait for each other at the first server they share instead of deadlocking across two
 * servers (which neither server could detect); `lock_timeout` bounds any other wait.
 *
 * A copy made here on a server that has none starts `synced` only when no server had a copy before (a new
 * cluster: every copy is empty); otherwise it starts unsynced and is filled from a synced copy at once (copy.ts).
 */
export interface ReferenceInstallResult {
  /** Servers whose copy this run created or changed. */
  changed: string[];
  /** Servers whose copy this run filled from another server, with the source. */
  filled: { server: string; from: string; rows: number }[];
}

export interface InstallOptions {
  /** Only these servers are created, changed and filled (the others are read for their state). Default: all. */
  only?: readonly string[];
  /** How long a lock is waited for (default 10 000 ms). */
  lockTimeoutMs?: number;
}

/**
 * Creates, upgrades and migrates the reference copies on the servers of `clients` (a client per configured server,
 * as connectAll makes them), then fills any unsynced copy. A config without reference tables changes nothing.
 */
export async function installReference(
  config: ClusterConfig,
  clients: ReadonlyMap<string, pg.Client>,
  options: InstallOptions = {},
): Promise<ReferenceInstallResult> {
  const result: ReferenceInstallResult = { changed: [], filled: [] };
  if (!hasReference(config)) return result;
  const order = serverOrder(config);
  const only = new Set(options.only ?? order);
  const lockTimeoutMs = Math.max(1, Math.round(options.lockTimeoutMs ?? 10_000));
  const clientOf = (server: string) => {
    const client = clients.get(server);
    if (!client) throw new ShardflakeError('UNKNOWN_SERVER', `no connection to server ${server}`);
    return client;
  };
  const states = new Map<string, ReferenceState | null>();
  for (const server of order) states.set(server, await readReferenceState(clientOf(server)));
  // A new cluster (no copy anywhere): every copy made now is empty, like all the others, so it starts synced.
  const fresh = [...states.values()].every((s) => s === null);
  // A server outside `only` whose copy runs older SQL gets the bookkeeping brought up to date (never its tables or
  // rows): a fill must find every copy's writers lock, copies list and digests (copy.ts, write.ts).
  const upgrade = (server: string) => {
    const state = states.get(server) ?? null;
    return !only.has(server) && state !== null && state.sqlVersion < REFERENCE_SQL_VERSION;
  };
  // The copies known synced now: every copy made by this run when the cluster is new, else the synced copies and
  // the lists they hold.
  const holders = new Set<string>(fresh ? order.filter((s) => only.has(s)) : []);
  for (const [server, state] of states) {
    if (state?.synced) holders.add(server);
    for (const listed of state?.copies ?? []) holders.add(listed);
  }
  const holderList = [...holders].sort();
  // Reference writes in doubt (prepared, their coordinator gone) would hold the tables' locks and make the DDL
  // below wait: they are settled by their decision first (one query per server when there are none).
  for (const server of order) {
    const state = states.get(server) ?? null;
    if ((only.has(server) && state !== null && !isCurrent(config, state)) || upgrade(server))
      await settlePreparedOnShards(config, server, [REFERENCE_SCHEMA], { failWith: 'MIGRATION_FAILED' });
  }

  const open: pg.Client[] = [];
  let at = '';
  let committing = false;
  try {
    for (const server of order) {
      if (!only.has(server) && !upgrade(server)) continue;
      at = server;
      const client = clientOf(server);
      const state = states.get(server) ?? null;
      await client.query(`BEGIN; SET LOCAL lock_timeout = ${lockTimeoutMs}`);
      open.push(client);
      if (!state || state.sqlVersion < REFERENCE_SQL_VERSION) await client.query(referenceSchemaSql());
      await client.query(
        `INSERT INTO ${STATE_TABLE} (sql_version, synced) VALUES ($1, $2)
         ON CONFLICT (singleton) DO UPDATE SET sql_version = greatest(${STATE_TABLE}.sql_version, excluded.sql_version)`,
        [REFERENCE_SQL_VERSION, fresh],
      );
      // Lists only grow, and only by copies that are synced: telling a writer of one more synced copy is always safe.
      await client.query(
        `UPDATE ${STATE_TABLE} SET copies = ARRAY(SELECT DISTINCT unnest(copies || $1::text[]) ORDER BY 1)`,
        [holderList],
      );
      if (upgrade(server)) {
        await client.query(referenceUpgradeSql());
        result.changed.push(server);
        continue;
      }
      // Under this lock another migrate waits, and then sees what this one applied.
      await client.query(`LOCK TABLE ${MIGRATIONS_TABLE} IN EXCLUSIVE MODE`);
      const { rows } = await client.query(
        `SELECT (SELECT coalesce(max(version), 0) FROM ${MIGRATIONS_TABLE})::int AS version,
                (SELECT coalesce(array_agg(name), '{}') FROM ${TABLES_TABLE}) AS tables`,
      );
      const now = rows[0] as { version: number; tables: string[] };
      if (now.version > config.referenceMigrations.length) {
        throw new ShardflakeError(
          'INVALID_CONFIG',
          `${config.source}: server ${server} has reference migration ${now.version} applied but the config lists ${config.referenceMigrations.length}; is the config out of date?`,
        );
      }
      const created = new Set(now.tables);
      const work =
        config.referenceTables.some((t) => !created.has(t.name)) ||
        now.version < config.referenceMigrations.length ||
        !state ||
        state.sqlVersion < REFERENCE_SQL_VERSION;
      if (work) {
        await client.query(
          referenceChangeSql(config.referenceTables, config.referenceMigrations, created, now.version),
        );
        result.changed.push(server);
      }
      // Every table's digest from its rows: a migration may change rows or their shape (a column added with a
      // default) where no trigger sees it, and a digest put out of step by hand is repaired here.
      await client.query(`SELECT ${DIGEST_ALL}`);
    }
    committing = true;
    while (open.length > 0) {
      const client = open[0] as pg.Client;
      at = [...clients].find(([, c]) => c === client)?.[0] ?? '';
      await client.query('COMMIT');
      open.shift();
    }
  } catch (error) {
    await Promise.all(open.map((c) => c.query('ROLLBACK').catch(() => {})));
    const e = wrapPgError(error);
    throw new ShardflakeError(
      e.code === 'DATABASE_ERROR' ? 'MIGRATION_FAILED' : e.code,
      `reference tables on server ${at}: ${e.message} (${
        committing
          ? 'servers before it in name order did commit: run cluster migrate again to bring the others up'
          : 'rolled back on every server'
      })`,
      { sqlState: e.sqlState, detail: e.detail, cause: error },
    );
  }
  // Routers write the copies the catalog lists (reference/servers.ts): every synced one is recorded there.
  await recordCopies(config, clientOf(config.catalog), holderList);

  for (const server of order) {
    if (!only.has(server)) continue;
    const filled = await fillCopy(config, clients, server, { lockTimeoutMs });
    if (filled) result.filled.push({ server, ...filled });
  }
  return result;
}

import type { Queryable } from '../postgres/connect.js';
import { HOLD_OFF_RESTORE_POINTS } from './restore-points.js';

/**
 * The SQL of cross-server transactions on `shardflake.*` tables (see ../transactions/cross.ts for the protocol).
 *
 * - `shardflake.transactions` on every server: the decision log. A cross-server commit writes its row in the
 *   local transaction of its "last agent" participant, so that participant's COMMIT is the decision; recovery
 *   writes an `abort` row (a tombstone) for a transaction it rolls back, so a coordinator that is still alive can
 *   never commit it afterwards (its own insert of the same txid fails on the primary key).
 * - `shardflake.cluster.cluster_id` on the catalog: the cluster's identity, carried in every gid, so recovery
 *   touches only its own cluster's prepared transactions.
 *
 * Versioned by a comment on the table (`shardflake transactions v1`); every statement is idempotent, and the
 * install is skipped when the recorded version is current (its ALTER would take an exclusive lock for nothing).
 */
export const TRANSACTIONS_SQL_VERSION = 1;
const VERSION_COMMENT = `shardflake transactions v${TRANSACTIONS_SQL_VERSION}`;

/** The decision log, for every server (a participant may be any of them). */
export function transactionLogSql(): string {
  return `
CREATE SCHEMA IF NOT EXISTS shardflake;
CREATE TABLE IF NOT EXISTS shardflake.transactions (
  txid text PRIMARY KEY,
  outcome text NOT NULL CHECK (outcome IN ('commit', 'abort')),
  gids text[] NOT NULL DEFAULT '{}',
  decided_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE shardflake.transactions IS '${VERSION_COMMENT}';`;
}

/** The cluster's identity, on the catalog (needs the cluster table of catalogSql). */
export function clusterIdentitySql(): string {
  return `
ALTER TABLE shardflake.cluster ADD COLUMN IF NOT EXISTS cluster_id text NOT NULL
  DEFAULT substr(replace(gen_random_uuid()::text, '-', ''), 1, 12);`;
}

/** The version the server's decision log was installed at (0: none). */
export async function transactionLogVersion(client: Queryable): Promise<number> {
  const { rows } = await client.query(
    `SELECT obj_description(to_regclass('shardflake.transactions'), 'pg_class') AS comment`,
  );
  const comment = (rows[0] as { comment: string | null } | undefined)?.comment ?? '';
  const match = /^shardflake transactions v(\d+)$/.exec(comment);
  return match ? Number(match[1]) : 0;
}

/**
 * Installs the decision log on one server unless it is current. Concurrent installers (two routers on demand)
 * are serialised by an advisory lock, because two `CREATE TABLE IF NOT EXISTS` at once can still collide.
 */
export async function installTransactionLog(client: Queryable): Promise<void> {
  if ((await transactionLogVersion(client)) >= TRANSACTIONS_SQL_VERSION) return;
  await client.query('BEGIN');
  try {
    await client.query(`SELECT pg_advisory_xact_lock(hashtext('shardflake.transactions'))`);
    await client.query(transactionLogSql());
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** Installs the cluster identity on the catalog (after the catalog's own tables); a no-op when present. */
export async function installClusterIdentity(catalog: Queryable): Promise<void> {
  const { rows } = await catalog.query(
    `SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('shardflake.cluster') AND attname = 'cluster_id' AND NOT attisdropped`,
  );
  if (rows.length === 0) await catalog.query(clusterIdentitySql());
}

/** Whether the catalog holds a cluster (`cluster init` wrote its row). */
export async function catalogHasCluster(catalog: Queryable): Promise<boolean> {
  const info = await catalog.query(`SELECT to_regclass('shardflake.cluster') IS NOT NULL AS ok`);
  if (!(info.rows[0] as { ok: boolean }).ok) return false;
  return (await catalog.query('SELECT 1 FROM shardflake.cluster WHERE singleton')).rows.length > 0;
}

/**
 * The cluster's identity; null before `cluster init` wrote the cluster row. A catalog made before identities
 * existed gets one when `create` is set (a router about to commit across servers); readers (status, verify,
 * recover) get null instead, which means that no transaction across servers was ever prepared in this cluster.
 */
export async function readClusterId(
  catalog: Queryable,
  options: { create: boolean } = { create: true },
): Promise<string | null> {
  const exists = await catalog.query(`SELECT to_regclass('shardflake.cluster') IS NOT NULL AS ok`);
  if (!(exists.rows[0] as { ok: boolean }).ok) return null;
  if (options.create) await installClusterIdentity(catalog);
  else {
    const { rows } = await catalog.query(
      `SELECT 1 FROM pg_attribute WHERE attrelid = 'shardflake.cluster'::regclass AND attname = 'cluster_id' AND NOT attisdropped`,
    );
    if (rows.length === 0) return null;
  }
  const { rows } = await catalog.query('SELECT cluster_id FROM shardflake.cluster WHERE singleton');
  return (rows[0] as { cluster_id: string } | undefined)?.cluster_id ?? null;
}

/**
 * The decision row, written inside the last agent's local transaction: fails on the primary key (23505) when
 * recovery has aborted the txid, and on `outcome`'s NOT NULL (23502) when that transaction began more than `$3` ms
 * ago — the bound that lets recovery delete old abort rows (see recovery.ts). It never succeeds without writing the
 * row: the coordinator sends its COMMIT in the same round trip (transactions/cross.ts), which PostgreSQL skips
 * only when a statement before it failed.
 *
 * It also makes the decision's COMMIT at least as durable as PostgreSQL's default: a session that set
 * synchronous_commit weaker than `on` (off, local, remote_write — e.g. `SET LOCAL synchronous_commit = off` inside
 * withShards) would otherwise get a COMMIT that returns before its decision is safe, and a crash (or a failover to
 * a synchronous standby) could lose a decision whose COMMIT PREPARED already ran elsewhere: half a transaction.
 * Stronger settings (on, remote_apply) are kept. CASE evaluates in order, so set_config runs only when needed.
 *
 * And it takes the restore-point lock shared (restore-points.ts), held until the COMMIT that is the decision: a
 * restore point, which takes it exclusive on every server, never falls between a decision and its prepared parts
 * (backups/restore-point.ts). No row is written without the lock: the WHERE, which takes it, is true or raises.
 */
export const INSERT_DECISION_SQL = `INSERT INTO shardflake.transactions (txid, outcome, gids)
  SELECT $1, CASE WHEN clock_timestamp() - now() < make_interval(secs => $3::float8 / 1000) THEN 'commit' END,
    $2::text[]
  WHERE ${HOLD_OFF_RESTORE_POINTS}
    AND CASE WHEN current_setting('synchronous_commit') IN ('off', 'local', 'remote_write')
      THEN set_config('synchronous_commit', 'on', true) IS NOT NULL ELSE true END`;

/**
 * Recovery's tombstone: an `abort` row unless a row is there. A coordinator's uncommitted decision row makes this
 * wait (unique index); the caller bounds that wait with lock_timeout.
 */
export const INSERT_ABORT_SQL = `INSERT INTO shardflake.transactions (txid, outcome) VALUES ($1, 'abort') ON CONFLICT (txid) DO NOTHING`;

export const READ_DECISIONS_SQL = `SELECT txid, outcome FROM shardflake.transactions WHERE txid = ANY($1::text[])`;

/** Prepared transactions of this database whose gid starts with `prefix` (with their age). */
export const LIST_PREPARED_SQL = `SELECT gid, prepared, (extract(epoch FROM now() - prepared) * 1000)::float8 AS age_ms
  FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1) ORDER BY prepared`;

/**
 * Decision rows older than their retention (`$1` ms for commit rows, `$2` for abort rows): candidates for removal
 * once no server holds one of their gids prepared.
 */
export const OLD_DECISIONS_SQL = `SELECT txid FROM shardflake.transactions
  WHERE decided_at < now() - make_interval(secs => (CASE WHEN outcome = 'commit' THEN $1 ELSE $2 END)::float8 / 1000)`;

/**
 * Deleting a decision changes what recovery would decide for a gid still prepared on a server restored to an
 * earlier moment, so it takes the restore-point lock shared as a decision does (backups/restore-point.ts).
 */
export const DELETE_DECISIONS_SQL = `DELETE FROM shardflake.transactions WHERE txid = ANY($1::text[]) AND ${HOLD_OFF_RESTORE_POINTS}`;

/** Whether the server can prepare transactions, and whether its decision log is installed and current. */
export const CAPABILITY_SQL = `SELECT current_setting('max_prepared_transactions')::int AS max_prepared,
  coalesce(obj_description(to_regclass('shardflake.transactions'), 'pg_class'), '') = '${VERSION_COMMENT}' AS log_ready`;

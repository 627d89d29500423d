import type { Queryable } from '../postgres/connect.js';

/**
 * The catalog's record of deadlocks across servers that routers broke (deadlocks/detector.ts), for `cluster
 * status`: one row per deadlock, written by the victim's router once it has cancelled its transaction. Best
 * effort: a router that cannot write it (the catalog down, a role without INSERT) still breaks the deadlock and
 * reports it as an event. Rows older than `RETAIN_DAYS` go with each new one, so the table stays small however
 * contended the application is.
 */
export const DEADLOCKS_SQL = `
CREATE SCHEMA IF NOT EXISTS shardflake;
CREATE TABLE IF NOT EXISTS shardflake.deadlocks (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  victim text NOT NULL,
  transactions text[] NOT NULL,
  sessions integer NOT NULL,
  servers text[] NOT NULL,
  waited_ms integer NOT NULL
);`;

const RETAIN_DAYS = 7;

/**
 * Installs the table. One statement string (one implicit transaction), so it never interleaves with other statements
 * queued on a shared connection; two installers at once can still collide on CREATE TABLE IF NOT EXISTS (a unique
 * violation in pg_type, or "already exists"), which means the other one made it.
 */
export async function installDeadlockLog(client: Queryable): Promise<void> {
  try {
    await client.query(DEADLOCKS_SQL);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== '23505' && code !== '42P07') throw error;
  }
}

/** One deadlock broken, as the catalog keeps it. */
export interface DeadlockRecord {
  /** When the victim's router recorded it (the catalog's clock), ISO 8601. */
  at: string;
  /** The txid of the transaction cancelled. */
  victim: string;
  /** The txids of the transactions across shards in the cycle, oldest first. */
  transactions: string[];
  /** Sessions in the cycle in all (the transactions and any other session waiting among them). */
  sessions: number;
  /** The servers the cycle's waits were on. */
  servers: string[];
  /** How long the victim had waited when it was cancelled (ms). */
  waitedMs: number;
}

/** Records a deadlock, dropping the rows older than the retention; installs the table on first use. */
export async function recordDeadlock(
  catalog: Queryable,
  deadlock: Omit<DeadlockRecord, 'at'>,
): Promise<void> {
  const write = () =>
    catalog.query(
      `WITH old AS (DELETE FROM shardflake.deadlocks WHERE at < now() - make_interval(days => ${RETAIN_DAYS}))
       INSERT INTO shardflake.deadlocks (victim, transactions, sessions, servers, waited_ms)
       VALUES ($1, $2::text[], $3, $4::text[], $5)`,
      [
        deadlock.victim,
        deadlock.transactions,
        deadlock.sessions,
        deadlock.servers,
        Math.round(deadlock.waitedMs),
      ],
    );
  try {
    await write();
  } catch (error) {
    // 42P01: a cluster made before the table existed.
    if ((error as { code?: string }).code !== '42P01') throw error;
    await installDeadlockLog(catalog);
    await write();
  }
}

/** What `cluster status` shows of the deadlocks broken: counts and the latest few. */
export interface DeadlocksStatus {
  /** Deadlocks broken in the last 24 hours. */
  lastDay: number;
  /** Deadlocks the catalog keeps (those of the last 7 days). */
  kept: number;
  /** The latest, newest first (at most 5). */
  latest: DeadlockRecord[];
}

/** The deadlocks recorded on the catalog; zero counts when the table is not there yet. */
export async function readDeadlocks(catalog: Queryable, limit = 5): Promise<DeadlocksStatus> {
  const exists = await catalog.query(`SELECT to_regclass('shardflake.deadlocks') IS NOT NULL AS ok`);
  if (!(exists.rows[0] as { ok: boolean }).ok) return { lastDay: 0, kept: 0, latest: [] };
  const counts = await catalog.query(
    `SELECT count(*) FILTER (WHERE at > now() - interval '1 day')::int AS last_day, count(*)::int AS kept
     FROM shardflake.deadlocks`,
  );
  const { rows } = await catalog.query(
    `SELECT at, victim, transactions, sessions, servers, waited_ms FROM shardflake.deadlocks
     ORDER BY id DESC LIMIT $1`,
    [limit],
  );
  const c = counts.rows[0] as { last_day: number; kept: number };
  return {
    lastDay: c.last_day,
    kept: c.kept,
    latest: (
      rows as {
        at: Date;
        victim: string;
        transactions: string[];
        sessions: number;
        servers: string[];
        waited_ms: number;
      }[]
    ).map((r) => ({
      at: r.at.toISOString(),
      victim: r.victim,
      transactions: r.transactions,
      sessions: r.sessions,
      servers: r.servers,
      waitedMs: r.waited_ms,
    })),
  };
}

import type pg from 'pg';
import { connect, describeUrl, wrapPgError } from '../postgres/connect.js';
import { lsnToBigint } from '../topology/lsn.js';

/**
 * The live part of `cluster status`: per shard its rows, size and activity, per node its connections and (for a
 * replica) how far behind it is. One query per server for all its shards (the shard schemas go in as one array
 * parameter), so 8192 shards cost one round trip per server, not one per shard.
 */
export interface ShardStats {
  /** Live rows as the statistics estimate them (n_live_tup, kept current by every insert and delete). */
  rows: number;
  /** Tables, indexes and TOAST on disk. */
  bytes: number;
  /** Rows inserted since the server's statistics were last reset (n_tup_ins). */
  inserts: number;
  /** Rows updated since the server's statistics were last reset (n_tup_upd). */
  updates: number;
  /** Rows deleted since the server's statistics were last reset (n_tup_del). */
  deletes: number;
}

/** One node of a server in `cluster status`: its role, connections and, for a replica, how far it lags. */
export interface NodeStatus {
  /** The node's URL, password redacted. */
  node: string;
  /** What the node answered to pg_is_in_recovery(); null when it did not answer. */
  role: 'primary' | 'replica' | null;
  /** False when connecting (3 s timeout) or the status query failed; the counts are then null. */
  reachable: boolean;
  /** Client connections open to the node; null when it did not answer. */
  connections: number | null;
  /** Client connections running a statement now (not idle); null when the node did not answer. */
  activeConnections: number | null;
  /** The node's max_connections setting; null when it did not answer. */
  maxConnections: number | null;
  /** When this database's statistics were last reset (null: never). */
  statsReset: string | null;
  /** Replicas: WAL bytes the primary has written that this replica has not replayed yet. */
  lagBytes: number | null;
  /** Replicas: seconds since the last replayed transaction while WAL waits to be replayed; 0 when caught up. */
  lagSeconds: number | null;
  /** Why a node that did not answer did not (one line, e.g. an AUTH_FAILED's); absent when it answered. */
  error?: string;
}

const SHARD_STATS_SQL = `SELECT schemaname AS schema,
  sum(n_live_tup)::float8 AS rows, sum(pg_total_relation_size(relid))::float8 AS bytes,
  sum(n_tup_ins)::float8 AS inserts, sum(n_tup_upd)::float8 AS updates, sum(n_tup_del)::float8 AS deletes
FROM pg_stat_user_tables
WHERE schemaname = ANY($1::text[]) AND relname NOT LIKE '\\_shardflake%'
GROUP BY schemaname`;

const NODE_SQL = `SELECT pg_is_in_recovery() AS in_recovery,
  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS connections,
  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND state <> 'idle')::int AS active,
  current_setting('max_connections')::int AS max_connections,
  (SELECT stats_reset FROM pg_stat_database WHERE datname = current_database()) AS stats_reset,
  (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text AS lsn,
  CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
       ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END::float8 AS lag_seconds`;

/** Stats of the given shard schemas on one server (its primary), by schema. */
export async function readShardStats(
  client: pg.ClientBase,
  schemas: readonly string[],
): Promise<Map<string, ShardStats>> {
  const { rows } = await client.query(SHARD_STATS_SQL, [schemas]);
  return new Map(
    rows.map((r) => [
      r.schema as string,
      {
        rows: r.rows,
        bytes: r.bytes,
        inserts: r.inserts,
        updates: r.updates,
        deletes: r.deletes,
      } as ShardStats,
    ]),
  );
}

/**
 * Every node of a server, asked in parallel; a node that does not answer is reported unreachable, not thrown:
 * status is what an operator runs when something is wrong. Lag in bytes is measured against the primary's
 * current WAL position read in the same pass.
 */
export async function readNodes(urls: readonly string[], connectTimeoutMs = 3000): Promise<NodeStatus[]> {
  const answers = await Promise.all(
    urls.map(async (url) => {
      let client: pg.Client;
      try {
        client = await connect(url, { connectTimeoutMs, applicationName: 'shardflake status' });
      } catch (error) {
        return { failed: (error as Error).message };
      }
      try {
        return (await client.query(NODE_SQL)).rows[0] as {
          in_recovery: boolean;
          connections: number;
          active: number;
          max_connections: number;
          stats_reset: Date | null;
          lsn: string | null;
          lag_seconds: number;
        };
      } catch (error) {
        return { failed: wrapPgError(error).message };
      } finally {
        await client.end().catch(() => {});
      }
    }),
  );
  const primaryLsn = answers.flatMap((a) => ('failed' in a || a.in_recovery ? [] : [a.lsn]))[0];
  return answers.map((a, i) => {
    const node = describeUrl(urls[i] as string);
    if ('failed' in a)
      return {
        node,
        role: null,
        reachable: false,
        connections: null,
        activeConnections: null,
        maxConnections: null,
        statsReset: null,
        lagBytes: null,
        lagSeconds: null,
        error: a.failed,
      };
    const replica = a.in_recovery;
    return {
      node,
      role: replica ? 'replica' : 'primary',
      reachable: true,
      connections: a.connections,
      activeConnections: a.active,
      maxConnections: a.max_connections,
      statsReset: a.stats_reset ? a.stats_reset.toISOString() : null,
      lagBytes:
        replica && primaryLsn && a.lsn
          ? Math.max(0, Number(lsnToBigint(primaryLsn) - lsnToBigint(a.lsn)))
          : replica
            ? null
            : 0,
      lagSeconds: replica ? a.lag_seconds : 0,
    };
  });
}

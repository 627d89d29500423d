import type { Queryable } from '../postgres/connect.js';

/** The catalog's worker-id leases (leases/leases.ts says what they guarantee): the table and its statements. */
export const LEASES_SQL = `
CREATE SCHEMA IF NOT EXISTS shardflake;
CREATE SEQUENCE IF NOT EXISTS shardflake.lease_token;
CREATE TABLE IF NOT EXISTS shardflake.worker_leases (
  namespace text NOT NULL,
  worker integer NOT NULL CHECK (worker >= 0),
  holder text NOT NULL,
  token bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (namespace, worker)
);`;

export async function installLeases(client: Queryable): Promise<void> {
  await client.query(LEASES_SQL);
}

/**
 * Grants the lowest worker id of `namespace` (below `maxWorkers`) that is free or expired, with a fresh fencing
 * token and an expiry `ttlMs` from the catalog's clock; null when the race for it was lost or none is free.
 */
export async function grantLease(
  catalog: Queryable,
  lease: { namespace: string; maxWorkers: number; holder: string; ttlMs: number },
): Promise<{ worker: number; token: bigint } | null> {
  const { rows } = await catalog.query(
    `WITH candidate AS (
       SELECT w FROM generate_series(0, $2::int - 1) AS w
       WHERE NOT EXISTS (SELECT 1 FROM shardflake.worker_leases l
                         WHERE l.namespace = $1 AND l.worker = w AND l.expires_at > clock_timestamp())
       ORDER BY w LIMIT 1)
     INSERT INTO shardflake.worker_leases AS l (namespace, worker, holder, token, expires_at)
     SELECT $1, w, $3, nextval('shardflake.lease_token'), clock_timestamp() + make_interval(secs => $4::float8 / 1000)
     FROM candidate
     ON CONFLICT (namespace, worker) DO UPDATE
       SET holder = excluded.holder, token = excluded.token, expires_at = excluded.expires_at
       WHERE l.expires_at <= clock_timestamp()
     RETURNING worker, token`,
    [lease.namespace, lease.maxWorkers, lease.holder, lease.ttlMs],
  );
  const row = rows[0] as { worker: number; token: bigint } | undefined;
  return row ? { worker: row.worker, token: BigInt(row.token) } : null;
}

/** Extends a lease still held under `token` and not expired; false when it was lost. */
export async function renewLease(
  catalog: Queryable,
  lease: { namespace: string; worker: number; token: bigint; ttlMs: number },
): Promise<boolean> {
  const { rowCount } = await catalog.query(
    `UPDATE shardflake.worker_leases SET expires_at = clock_timestamp() + make_interval(secs => $4::float8 / 1000)
     WHERE namespace = $1 AND worker = $2 AND token = $3 AND expires_at > clock_timestamp()`,
    [lease.namespace, lease.worker, lease.token, lease.ttlMs],
  );
  return (rowCount ?? 0) > 0;
}

/** Gives a worker id back (only while still held under `token`). */
export async function releaseLease(
  catalog: Queryable,
  lease: { namespace: string; worker: number; token: bigint },
): Promise<void> {
  await catalog.query(
    'DELETE FROM shardflake.worker_leases WHERE namespace = $1 AND worker = $2 AND token = $3',
    [lease.namespace, lease.worker, lease.token],
  );
}

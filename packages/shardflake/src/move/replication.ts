import { ShardflakeError } from '../errors/errors.js';
import { type Queryable, wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';

/**
 * Catch-up of a move's shard schemas with PostgreSQL logical replication: a publication for the schemas on the
 * source, a replication slot there (made by the copy, snapshot-copy.ts, whose snapshot the copy reads), and a
 * subscription on the target that streams from that slot the changes made since.
 *
 * Names of the replication objects come from the move's stream id (`sf_move_<id>`), so a rerun or `cluster
 * cleanup` can always find and drop what an interrupted move left behind.
 */
export interface ReplicationNames {
  publication: string;
  subscription: string;
  slot: string;
}

export const REPLICATION_PREFIX = 'sf_move_';

export function replicationNames(moveId: bigint): ReplicationNames {
  const name = `${REPLICATION_PREFIX}${moveId}`;
  return { publication: name, subscription: name, slot: name };
}

/** The publication of every table of `schemas` (tables created later in them too); idempotent. */
export async function createPublication(
  source: Queryable,
  name: string,
  schemas: readonly string[],
): Promise<void> {
  const { rows } = await source.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [name]);
  if (rows.length > 0) return;
  await source.query(
    `CREATE PUBLICATION ${quoteIdent(name)} FOR TABLES IN SCHEMA ${schemas.map((s) => quoteIdent(s, 'schema')).join(', ')}`,
  );
}

export async function dropPublication(source: Queryable, name: string): Promise<void> {
  await source.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(name)}`);
}

/** Oid of the subscription, or null. */
export async function subscriptionOid(target: Queryable, name: string): Promise<bigint | null> {
  const { rows } = await target.query(
    'SELECT oid::bigint AS oid FROM pg_subscription WHERE subname = $1 AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())',
    [name],
  );
  return rows[0] ? BigInt((rows[0] as { oid: bigint }).oid) : null;
}

/**
 * How a subscription logs in to the source. The connection string shardflake writes into CREATE SUBSCRIPTION
 * never holds a password: it is stored in pg_subscription.subconninfo, shown in pg_stat_activity while the
 * statement runs and written to the server log under `log_statement = ddl`. The target server's libpq finds the
 * secret itself: in `passfile` (a path on the target's host, readable by the server's OS user, mode 0600), else
 * in the server's environment (PGPASSFILE, PGPASSWORD, ~/.pgpass of its OS user), or needs none (cert, peer).
 */
export interface ReplicationLogin {
  /** The role the subscription logs in as on the source (default: the source URL's user). Needs REPLICATION. */
  user?: string;
  /** A passfile on the target server's host (default: the target server's own environment). */
  passfile?: string;
}

/** libpq keywords that carry a secret, or point the subscription elsewhere for one: never copied from the URL. */
const DROPPED_KEYWORDS = new Set(['password', 'sslpassword', 'passfile']);

function conninfoValue(value: string): string {
  return `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
}

/**
 * The subscription's key=value connection string for the source at `sourceUrl`: host, port, database and the
 * URL's other parameters (sslmode …), the login's user and passfile, and no password.
 */
export function subscriptionConninfo(sourceUrl: string, login: ReplicationLogin = {}): string {
  const url = new URL(sourceUrl);
  const pairs: [string, string][] = [];
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  if (host) pairs.push(['host', decodeURIComponent(host)]);
  if (url.port) pairs.push(['port', url.port]);
  const user = login.user ?? decodeURIComponent(url.username);
  const dbname = decodeURIComponent(url.pathname.replace(/^\//, ''));
  pairs.push(['dbname', dbname || user || 'postgres']);
  if (user) pairs.push(['user', user]);
  for (const [key, value] of url.searchParams) {
    if (!DROPPED_KEYWORDS.has(key.toLowerCase()) && !['host', 'port', 'dbname', 'user'].includes(key)) {
      pairs.push([key, value]);
    }
  }
  if (login.passfile) pairs.push(['passfile', login.passfile]);
  return pairs.map(([k, v]) => `${k}=${conninfoValue(v)}`).join(' ');
}

/**
 * CREATE SUBSCRIPTION's error, with a target that could not log in to the source said as such: the secret is the
 * target server's to find (ReplicationLogin), and the message says where it looked.
 */
export function subscriptionError(error: unknown, login: ReplicationLogin | undefined): ShardflakeError {
  const wrapped = wrapPgError(error);
  if (!/no password supplied|password authentication failed|password is required/i.test(wrapped.message))
    return wrapped;
  const where = login?.passfile
    ? `the passfile ${login.passfile} on the target's host`
    : "the target server's environment (PGPASSFILE, ~/.pgpass of its OS user)";
  return new ShardflakeError(
    'INSUFFICIENT_PRIVILEGE',
    `the target server could not log in to the source${login?.user ? ` as role ${login.user}` : ''}: subscriptions carry no password, so put it in ${where}, or use --replication-passfile (docs/security.md)`,
    { sqlState: wrapped.sqlState, cause: error },
  );
}

/** Lets the replication login read `tables` for the subscription's initial copy (it needs nothing more). */
export async function grantReplicationRead(
  source: Queryable,
  login: ReplicationLogin | undefined,
  schema: string,
  tables: readonly string[],
): Promise<void> {
  if (!login?.user || tables.length === 0) return;
  await source.query(`GRANT USAGE ON SCHEMA ${quoteIdent(schema, 'schema')} TO ${quoteIdent(login.user)}`);
  await source.query(
    `GRANT SELECT ON ${tables.map((t) => qualified(schema, t)).join(', ')} TO ${quoteIdent(login.user)}`,
  );
}

/**
 * Creates the subscription on the slot the copy made (no copy of its own). `binary` makes the change stream use
 * binary send/receive (both servers run the same major version);
 * `streaming = off` keeps every transaction applied by the one apply worker, in commit order, which the cutover's
 * "received up to the source's LSN" test relies on. The connection string has no password (ReplicationLogin).
 */
export async function createSubscription(
  target: Queryable,
  names: ReplicationNames,
  sourceUrl: string,
  login?: ReplicationLogin,
): Promise<bigint> {
  const existing = await subscriptionOid(target, names.subscription);
  if (existing !== null) return existing;
  try {
    await target.query(
      `CREATE SUBSCRIPTION ${quoteIdent(names.subscription)} CONNECTION ${quoteLiteral(subscriptionConninfo(sourceUrl, login))}
       PUBLICATION ${quoteIdent(names.publication)}
       WITH (copy_data = false, create_slot = false, slot_name = ${quoteLiteral(names.slot)}, enabled = true, streaming = off, binary = true)`,
    );
  } catch (error) {
    throw subscriptionError(error, login);
  }
  return (await subscriptionOid(target, names.subscription)) as bigint;
}

/**
 * Drops the subscription. With the source reachable, DROP SUBSCRIPTION also drops the slot and any table-sync
 * slots there; when it is not, the subscription is detached from its slot first so that the drop cannot fail,
 * and `dropSlots` on the source finishes the job later.
 */
export async function dropSubscription(
  target: Queryable,
  name: string,
  sourceReachable: boolean,
): Promise<void> {
  if ((await subscriptionOid(target, name)) === null) return;
  const sub = quoteIdent(name);
  if (sourceReachable) {
    try {
      await target.query(`DROP SUBSCRIPTION ${sub}`);
      return;
    } catch {
      // Fall through: detach from the slot, then drop; the source's slots are dropped by dropSlots.
    }
  }
  await target.query(`ALTER SUBSCRIPTION ${sub} DISABLE`);
  await target.query(`ALTER SUBSCRIPTION ${sub} SET (slot_name = NONE)`);
  await target.query(`DROP SUBSCRIPTION ${sub}`);
}

/** Drops the move's slot and the table-sync slots of its subscription on the source, ending their walsenders. */
export async function dropSlots(
  source: Queryable,
  slot: string,
  subscriptionOid: bigint | null,
): Promise<string[]> {
  const dropped: string[] = [];
  for (let attempt = 0; attempt < 50; attempt++) {
    const { rows } = await source.query(
      `SELECT slot_name::text AS name, active_pid FROM pg_replication_slots
        WHERE database = current_database() AND (slot_name = $1 OR ($2::text IS NOT NULL AND slot_name::text LIKE 'pg\\_' || $2 || '\\_sync\\_%'))`,
      [slot, subscriptionOid === null ? null : subscriptionOid.toString()],
    );
    if (rows.length === 0) return dropped;
    for (const r of rows as { name: string; active_pid: number | null }[]) {
      try {
        if (r.active_pid !== null) await source.query('SELECT pg_terminate_backend($1)', [r.active_pid]);
        await source.query('SELECT pg_drop_replication_slot($1)', [r.name]);
        dropped.push(r.name);
      } catch {
        // Still active (the walsender is exiting) or already gone: look again.
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new ShardflakeError(
    'MOVE_FAILED',
    `could not drop replication slot ${slot} on the source: it stays active`,
  );
}

export async function currentLsn(client: Queryable): Promise<string> {
  const { rows } = await client.query('SELECT pg_current_wal_lsn()::text AS lsn');
  return (rows[0] as { lsn: string }).lsn;
}

export interface SubscriptionProgress {
  tables: number;
  ready: number;
  /** Rows the running table copies have written so far (pg_stat_progress_copy). */
  copying: bigint;
  /** Apply/sync errors since the subscription was created. */
  errors: number;
  /** Whether the apply worker has received WAL up to `lsn` (given as text). */
  receivedUpTo: boolean;
}

export async function subscriptionProgress(
  target: Queryable,
  name: string,
  lsn?: string,
): Promise<SubscriptionProgress> {
  const { rows } = await target.query(
    `SELECT (SELECT count(*)::int FROM pg_subscription_rel r WHERE r.srsubid = s.oid) AS tables,
            (SELECT count(*)::int FROM pg_subscription_rel r WHERE r.srsubid = s.oid AND r.srsubstate = 'r') AS ready,
            (SELECT coalesce(sum(p.tuples_processed), 0)::bigint FROM pg_stat_progress_copy p
              WHERE p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())) AS copying,
            (SELECT coalesce(st.apply_error_count + st.sync_error_count, 0)::int
               FROM pg_stat_subscription_stats st WHERE st.subid = s.oid) AS errors,
            coalesce((SELECT w.received_lsn >= $2::pg_lsn FROM pg_stat_subscription w
                       WHERE w.subid = s.oid AND w.relid IS NULL AND w.received_lsn IS NOT NULL
                       LIMIT 1), false) AS received
       FROM pg_subscription s WHERE s.subname = $1`,
    [name, lsn ?? '0/0'],
  );
  const r = rows[0] as
    | { tables: number; ready: number; copying: bigint; errors: number | null; received: boolean }
    | undefined;
  if (!r) throw new ShardflakeError('MOVE_FAILED', `subscription ${name} disappeared from the target`);
  return {
    tables: r.tables,
    ready: r.ready,
    copying: BigInt(r.copying),
    errors: r.errors ?? 0,
    receivedUpTo: r.received,
  };
}

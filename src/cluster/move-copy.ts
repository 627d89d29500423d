import type pg from 'pg';
import { ShardflakeError } from '../errors.js';
import { type Queryable, wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import type { ClusterConfig } from './config.js';
import { shardCreationSql } from './shard-ddl.js';

/**
 * Copy and catch-up of one shard schema with PostgreSQL logical replication: a publication for the schema's
 * tables on the source, a subscription (with its replication slot on the source) on the target. The initial copy
 * is the subscription's own COPY of each table; changes made meanwhile stream through the slot.
 *
 * Names of the replication objects come from the move id (`sf_move_<id>`), so a rerun or `cluster cleanup` can
 * always find and drop what an interrupted move left behind.
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

export interface SourceTable {
  name: string;
  primaryKey: string[];
  /** `column type, …` in column order: the shape both copies must share. */
  shape: string;
}

/** The schema's tables with their primary keys and shapes (ordered by name). */
export async function listTables(client: Queryable, schema: string): Promise<SourceTable[]> {
  const { rows } = await client.query(
    `SELECT c.relname AS name,
            coalesce((SELECT array_agg(a.attname::text ORDER BY k.ord)
                        FROM pg_index i
                        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
                       WHERE i.indrelid = c.oid AND i.indisprimary), '{}') AS pk,
            (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
               FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS shape
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      ORDER BY c.relname`,
    [schema],
  );
  return rows.map((r: { name: string; pk: string[]; shape: string }) => ({
    name: r.name,
    primaryKey: r.pk,
    shape: r.shape ?? '',
  }));
}

export async function schemaExists(client: Queryable, schema: string): Promise<boolean> {
  const { rows } = await client.query('SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS ok', [
    schema,
  ]);
  return (rows[0] as { ok: boolean }).ok;
}

/** Refuses a table without a primary key: logical replication could not apply its UPDATEs and DELETEs. */
export function requirePrimaryKeys(schema: string, tables: readonly SourceTable[]): void {
  const missing = tables.filter((t) => t.primaryKey.length === 0).map((t) => `${schema}.${t.name}`);
  if (missing.length > 0) {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `cannot move: table ${missing.join(', ')} has no primary key, so logical replication could not copy its updates and deletes; add one with a migration and move again`,
    );
  }
}

/**
 * Creates the shard on the target from the cluster's own table templates and migrations (the same SQL
 * `cluster init` runs), then empties every table so the subscription's initial copy brings the source's rows
 * (including `_shardflake_migrations`). Re-running the templates, rather than reverse-engineering DDL from the
 * catalog tables, gives the target exactly the generator, defaults and indexes every other shard has; the move
 * checks beforehand that the source is at the config's schema version and afterwards that both shapes match.
 */
export async function createTargetSchema(
  target: pg.Client,
  config: ClusterConfig,
  shard: number,
  schema: string,
): Promise<void> {
  await target.query('BEGIN');
  try {
    await target.query(shardCreationSql(config, shard, schema));
    const tables = await listTables(target, schema);
    if (tables.length > 0) {
      await target.query(`TRUNCATE ${tables.map((t) => qualified(schema, t.name)).join(', ')}`);
    }
    for (const index of await deferrableIndexes(target, schema)) {
      await target.query(`DROP INDEX ${qualified(schema, index.name)}`);
    }
    await target.query('COMMIT');
  } catch (error) {
    await target.query('ROLLBACK').catch(() => {});
    throw wrapPgError(error);
  }
}

/**
 * Plain (non-unique) indexes of the schema, with their full definitions. The target gets them only after the
 * initial copy: building an index over sorted data once is several times faster than updating it row by row
 * during COPY (on 200,000 rows with one secondary index: 1.4 s instead of 3.3 s here). Primary keys and unique
 * indexes stay during the copy, since applying replicated updates and deletes needs them.
 */
export async function deferrableIndexes(
  client: Queryable,
  schema: string,
): Promise<{ name: string; definition: string }[]> {
  const { rows } = await client.query(
    `SELECT ic.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i
       JOIN pg_class ic ON ic.oid = i.indexrelid
       JOIN pg_namespace n ON n.oid = ic.relnamespace
      WHERE n.nspname = $1 AND NOT i.indisunique AND NOT i.indisprimary AND i.indisvalid
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
      ORDER BY ic.relname`,
    [schema],
  );
  return rows as { name: string; definition: string }[];
}

/** Builds on the target every deferred index the source has and the target lacks (idempotent). */
export async function buildDeferredIndexes(
  source: Queryable,
  target: Queryable,
  schema: string,
): Promise<number> {
  const wanted = await deferrableIndexes(source, schema);
  const present = new Set((await deferrableIndexes(target, schema)).map((i) => i.name));
  let built = 0;
  for (const index of wanted) {
    if (present.has(index.name)) continue;
    // pg_get_indexdef names the schema, which is the same on both servers.
    await target.query(index.definition);
    built++;
  }
  return built;
}

export async function dropSchema(client: Queryable, schema: string): Promise<void> {
  await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema, 'schema')} CASCADE`);
}

export async function createPublication(
  source: Queryable,
  name: string,
  schema: string,
  tables: readonly string[],
): Promise<void> {
  const { rows } = await source.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [name]);
  if (rows.length > 0) return;
  await source.query(
    `CREATE PUBLICATION ${quoteIdent(name)} FOR TABLE ${tables.map((t) => qualified(schema, t)).join(', ')}`,
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
 * Creates the subscription (which creates the slot on the source and starts the initial copy). `binary` makes
 * the initial COPY and the change stream use binary send/receive (both servers run the same major version);
 * `streaming = off` keeps every transaction applied by the one apply worker, in commit order, which the cutover's
 * "received up to the source's LSN" test relies on. The connection
 * string is the source's URL from the config; it is stored in pg_subscription (readable by superusers only) and
 * never printed: errors pass through wrapPgError, which redacts passwords.
 */
export async function createSubscription(
  target: Queryable,
  names: ReplicationNames,
  sourceUrl: string,
): Promise<bigint> {
  const existing = await subscriptionOid(target, names.subscription);
  if (existing !== null) return existing;
  try {
    await target.query(
      `CREATE SUBSCRIPTION ${quoteIdent(names.subscription)} CONNECTION ${quoteLiteral(sourceUrl)}
       PUBLICATION ${quoteIdent(names.publication)}
       WITH (copy_data = true, create_slot = true, slot_name = ${quoteLiteral(names.slot)}, enabled = true, streaming = off, binary = true)`,
    );
  } catch (error) {
    throw wrapPgError(error);
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

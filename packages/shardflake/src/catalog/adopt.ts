import { ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';

/**
 * The catalog's record of an adoption (SPEC §I, src/adopt/): one row in `shardflake.adoption` (a cluster adopts
 * one database, once) and one row per adopted table in `shardflake.adoption_tables`. The phase is written after
 * each step happened, so a rerun of `adopt run` knows where the last one stopped:
 *
 * - `copying`    the cluster exists; the source has the adoption's slot and publication; the copy runs (a run
 *                killed here starts the copy again: the snapshot died with it).
 * - `streaming`  every table was copied at the slot's snapshot; the source's later commits are being applied.
 * - `fenced`     the source's tables refuse writes (SF001), the shards hold everything the source committed and
 *                were verified against it; the catalog still serves the source (a rerun switches).
 * - `switched`   the catalog serves the shards (new map version, NOTIFY); the source stays, fenced.
 * - `done`       the slot and publication are gone from the source.
 * - `aborted`    `adopt abort` removed what the adoption made (this row is then the only trace, kept for status).
 *
 * While the phase is before `switched`, routers serve every shard from the source (routing/map.ts reads this row
 * with the map): the application moves to the router first, and follows the switch as it follows a move.
 */
export const ADOPT_PHASES = ['copying', 'streaming', 'fenced', 'switched', 'done', 'aborted'] as const;
export type AdoptPhase = (typeof ADOPT_PHASES)[number];

export function adoptPhaseReached(phase: AdoptPhase, than: AdoptPhase): boolean {
  if (phase === 'aborted' || than === 'aborted') return phase === than;
  return ADOPT_PHASES.indexOf(phase) >= ADOPT_PHASES.indexOf(than);
}

export function adoptionSql(): string {
  return `
CREATE TABLE IF NOT EXISTS shardflake.adoption (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  phase text NOT NULL CHECK (phase IN (${ADOPT_PHASES.map((p) => `'${p}'`).join(', ')})),
  source_server text NOT NULL,
  source_url text NOT NULL,
  source_schema text NOT NULL,
  root_table text NOT NULL,
  tables text[] NOT NULL,
  slot text NOT NULL,
  publication text NOT NULL,
  old_ids_below bigint NOT NULL,
  created_cluster boolean NOT NULL,
  applied_lsn pg_lsn,
  applied_at timestamptz,
  behind_bytes bigint,
  cutover_requested boolean NOT NULL DEFAULT false,
  pause_ms double precision,
  last_error text,
  started_at timestamptz NOT NULL DEFAULT now(),
  switched_at timestamptz
);
CREATE TABLE IF NOT EXISTS shardflake.adoption_tables (
  name text PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('sharded', 'reference')),
  rows_estimate bigint NOT NULL DEFAULT 0,
  rows_copied bigint NOT NULL DEFAULT 0,
  copied boolean NOT NULL DEFAULT false
);`;
}

/** The adoption's row as the catalog holds it. */
export interface AdoptionRecord {
  phase: AdoptPhase;
  sourceServer: string;
  /** The source's URL without its password. */
  sourceUrl: string;
  sourceSchema: string;
  root: string;
  /** The adopted sharded tables, the root first. */
  tables: string[];
  slot: string;
  publication: string;
  /** Every id below this is an old id (made by the source); every id the cluster makes is above it. */
  oldIdsBelow: bigint;
  /** The adoption ran `cluster init` itself (abort then removes the cluster too). */
  createdCluster: boolean;
  appliedLsn: string | null;
  appliedAt: Date | null;
  behindBytes: bigint | null;
  cutoverRequested: boolean;
  pauseMs: number | null;
  lastError: string | null;
  startedAt: Date;
  switchedAt: Date | null;
}

export interface AdoptionTable {
  name: string;
  kind: 'sharded' | 'reference';
  rowsEstimate: bigint;
  rowsCopied: bigint;
  copied: boolean;
}

async function exists(client: Queryable): Promise<boolean> {
  const { rows } = await client.query("SELECT to_regclass('shardflake.adoption') IS NOT NULL AS ok");
  return (rows[0] as { ok: boolean }).ok;
}

/** The adoption's row, or null when this cluster never adopted a database. */
export async function readAdoption(client: Queryable): Promise<AdoptionRecord | null> {
  if (!(await exists(client))) return null;
  const { rows } = await client.query(
    `SELECT phase, source_server, source_url, source_schema, root_table, tables, slot, publication, old_ids_below,
            created_cluster, applied_lsn::text AS applied_lsn, applied_at, behind_bytes, cutover_requested, pause_ms,
            last_error, started_at, switched_at
       FROM shardflake.adoption WHERE singleton`,
  );
  const r = rows[0] as Record<string, unknown> | undefined;
  if (!r) return null;
  return {
    phase: r.phase as AdoptPhase,
    sourceServer: r.source_server as string,
    sourceUrl: r.source_url as string,
    sourceSchema: r.source_schema as string,
    root: r.root_table as string,
    tables: r.tables as string[],
    slot: r.slot as string,
    publication: r.publication as string,
    oldIdsBelow: BigInt(r.old_ids_below as bigint),
    createdCluster: r.created_cluster as boolean,
    appliedLsn: (r.applied_lsn as string | null) ?? null,
    appliedAt: (r.applied_at as Date | null) ?? null,
    behindBytes: r.behind_bytes === null ? null : BigInt(r.behind_bytes as bigint),
    cutoverRequested: r.cutover_requested as boolean,
    pauseMs: (r.pause_ms as number | null) ?? null,
    lastError: (r.last_error as string | null) ?? null,
    startedAt: r.started_at as Date,
    switchedAt: (r.switched_at as Date | null) ?? null,
  };
}

/** What a router needs of the adoption with its map (routing/map.ts): one small read. */
export interface AdoptionRouting {
  /** True before the switch: every shard is served from the source. */
  servingFromSource: boolean;
  sourceServer: string;
  sourceSchema: string;
  oldIdsBelow: bigint;
  root: string;
  tables: string[];
}

export async function readAdoptionRouting(client: Queryable): Promise<AdoptionRouting | null> {
  if (!(await exists(client))) return null;
  const { rows } = await client.query(
    'SELECT phase, source_server, source_schema, old_ids_below, root_table, tables FROM shardflake.adoption WHERE singleton',
  );
  const r = rows[0] as Record<string, unknown> | undefined;
  if (!r || r.phase === 'aborted') return null;
  return {
    servingFromSource: !adoptPhaseReached(r.phase as AdoptPhase, 'switched'),
    sourceServer: r.source_server as string,
    sourceSchema: r.source_schema as string,
    oldIdsBelow: BigInt(r.old_ids_below as bigint),
    root: r.root_table as string,
    tables: r.tables as string[],
  };
}

/**
 * Records a new adoption (phase `copying`) and its tables; an adoption already recorded is kept (a rerun) and
 * returned. One adoption per cluster: an aborted one is replaced.
 */
export async function recordAdoption(
  client: Queryable,
  row: Omit<
    AdoptionRecord,
    | 'phase'
    | 'appliedLsn'
    | 'appliedAt'
    | 'behindBytes'
    | 'cutoverRequested'
    | 'pauseMs'
    | 'lastError'
    | 'startedAt'
    | 'switchedAt'
  >,
  tables: readonly { name: string; kind: 'sharded' | 'reference' }[],
): Promise<void> {
  await client.query(adoptionSql());
  await client.query("DELETE FROM shardflake.adoption WHERE phase = 'aborted'");
  const { rowCount } = await client.query(
    `INSERT INTO shardflake.adoption (phase, source_server, source_url, source_schema, root_table, tables, slot,
       publication, old_ids_below, created_cluster)
     VALUES ('copying', $1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (singleton) DO NOTHING`,
    [
      row.sourceServer,
      row.sourceUrl,
      row.sourceSchema,
      row.root,
      row.tables,
      row.slot,
      row.publication,
      row.oldIdsBelow,
      row.createdCluster,
    ],
  );
  if (rowCount === 1) {
    await client.query('DELETE FROM shardflake.adoption_tables');
    await client.query(
      `INSERT INTO shardflake.adoption_tables (name, kind) SELECT * FROM unnest($1::text[], $2::text[])`,
      [tables.map((t) => t.name), tables.map((t) => t.kind)],
    );
  }
}

/** Sets the phase (and, with `fields`, the pause or the switch time); returns nothing. */
export async function setAdoptionPhase(
  client: Queryable,
  phase: AdoptPhase,
  fields: { pauseMs?: number; error?: string | null } = {},
): Promise<void> {
  await client.query(
    `UPDATE shardflake.adoption SET phase = $1, pause_ms = coalesce($2, pause_ms),
            last_error = CASE WHEN $3::boolean THEN $4 ELSE last_error END,
            switched_at = CASE WHEN $1 = 'switched' THEN now() ELSE switched_at END,
            cutover_requested = CASE WHEN $1 IN ('switched', 'done') THEN false ELSE cutover_requested END
      WHERE singleton`,
    [phase, fields.pauseMs ?? null, fields.error !== undefined, fields.error ?? null],
  );
}

export async function recordAdoptionError(client: Queryable, error: string | null): Promise<void> {
  await client.query('UPDATE shardflake.adoption SET last_error = $1 WHERE singleton', [error]);
}

/** The rows copied of each table (after each table of the copy) and whether its copy finished. */
export async function recordTableCopy(
  client: Queryable,
  table: string,
  rows: bigint,
  copied: boolean,
): Promise<void> {
  await client.query('UPDATE shardflake.adoption_tables SET rows_copied = $2, copied = $3 WHERE name = $1', [
    table,
    rows,
    copied,
  ]);
}

export async function recordTableEstimates(client: Queryable, estimates: ReadonlyMap<string, bigint>) {
  await client.query(
    `UPDATE shardflake.adoption_tables t SET rows_estimate = e.n, rows_copied = 0, copied = false
       FROM unnest($1::text[], $2::bigint[]) AS e(name, n) WHERE t.name = e.name`,
    [[...estimates.keys()], [...estimates.values()]],
  );
}

export async function readAdoptionTables(client: Queryable): Promise<AdoptionTable[]> {
  if (!(await exists(client))) return [];
  const { rows } = await client.query(
    'SELECT name, kind, rows_estimate, rows_copied, copied FROM shardflake.adoption_tables ORDER BY kind DESC, name',
  );
  return (rows as Record<string, unknown>[]).map((r) => ({
    name: r.name as string,
    kind: r.kind as 'sharded' | 'reference',
    rowsEstimate: BigInt(r.rows_estimate as bigint),
    rowsCopied: BigInt(r.rows_copied as bigint),
    copied: r.copied as boolean,
  }));
}

/** Where the stream stands: the last source LSN every target applied, and how far the source is ahead of it. */
export async function recordApplied(client: Queryable, lsn: string, behindBytes: bigint): Promise<void> {
  await client.query(
    'UPDATE shardflake.adoption SET applied_lsn = $1::pg_lsn, applied_at = now(), behind_bytes = $2 WHERE singleton',
    [lsn, behindBytes],
  );
}

/** `adopt cutover` asks the running `adopt run` to cut over; false when there is no adoption to cut over. */
export async function requestAdoptCutover(client: Queryable): Promise<boolean> {
  if (!(await exists(client))) return false;
  const { rowCount } = await client.query(
    "UPDATE shardflake.adoption SET cutover_requested = true WHERE singleton AND phase IN ('copying', 'streaming', 'fenced')",
  );
  return rowCount === 1;
}

/** Marks the adoption aborted (its tables' rows go: nothing of the adoption is left but this row). */
export async function markAdoptionAborted(client: Queryable): Promise<void> {
  if (!(await exists(client))) return;
  await client.query(
    "UPDATE shardflake.adoption SET phase = 'aborted', cutover_requested = false WHERE singleton",
  );
  await client.query('DELETE FROM shardflake.adoption_tables');
}

/** The advisory-lock key of a running `adopt run` ("_ADO"): a second run, or a cutover, can tell it is alive. */
export const ADOPT_LOCK_KEY = 0x5f41444f;

export async function tryLockAdoption(client: Queryable): Promise<boolean> {
  const { rows } = await client.query('SELECT pg_try_advisory_lock($1) AS ok', [ADOPT_LOCK_KEY]);
  return (rows[0] as { ok: boolean }).ok;
}

export async function unlockAdoption(client: Queryable): Promise<void> {
  await client.query('SELECT pg_advisory_unlock($1)', [ADOPT_LOCK_KEY]);
}

export function noAdoption(source: string): ShardflakeError {
  return new ShardflakeError(
    'INVALID_ARGUMENT',
    `${source}: this cluster has no adoption recorded; start one with shardflake cluster adopt run`,
  );
}

import type pg from 'pg';
import { bumpMapVersion, type ShardState } from '../cluster/catalog.js';
import type { ClusterConfig } from '../cluster/config.js';
import { connectServer } from '../cluster/connections.js';
import { MIGRATIONS_TABLE } from '../cluster/shard-ddl.js';
import { ShardflakeError } from '../errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import type { MoveStep, Options } from './options.js';
import type { MovePhase } from './phases.js';
import { type MoveRecord, recordPhase } from './record.js';
import type { ReplicationNames } from './replication.js';
import type { SourceTable } from './tables.js';

/**
 * The state one run of a shard move carries from step to step, and the small helpers every step uses: recording a
 * phase, the stop hook, connections, catalog updates.
 */

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The interruption of the test hook or an aborted signal: no rollback, the rerun resumes. */
export class MoveInterrupted extends ShardflakeError {
  constructor(message: string) {
    super('MOVE_FAILED', message, { detail: 'interrupted' });
  }
}

export function isInterrupted(error: unknown): boolean {
  return error instanceof MoveInterrupted;
}

export interface Session {
  config: ClusterConfig;
  opts: Options;
  catalog: pg.Client;
  source: pg.Client;
  target: pg.Client;
  record: MoveRecord;
  names: ReplicationNames;
  tables: SourceTable[];
  copyMs: number | null;
  pauseMs: number | null;
  pauseSteps: Record<string, number>;
  indexMs: number | null;
  copiedRows: bigint;
  rows: bigint;
  snapshot: { pauseMs: number; compareMs: number } | null;
  mapVersion: bigint;
}

/** A session at the start of a run (fresh or resumed): connections, the move's record, nothing measured yet. */
export function newSession(
  parts: Pick<Session, 'config' | 'opts' | 'catalog' | 'source' | 'target' | 'record' | 'names' | 'tables'>,
): Session {
  return {
    ...parts,
    copyMs: null,
    pauseMs: null,
    pauseSteps: {},
    indexMs: null,
    copiedRows: 0n,
    rows: 0n,
    snapshot: null,
    mapVersion: 0n,
  };
}

/**
 * One connection of the move to a server's primary (through the cluster's connections, which find the primary);
 * failures name the server.
 */
export async function openServer(config: ClusterConfig, server: string): Promise<pg.Client> {
  if (!(server in config.servers)) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `server ${JSON.stringify(server)} is not in the config (servers: ${Object.keys(config.servers).join(', ')})`,
    );
  }
  try {
    return await connectServer(config, server, {
      applicationName: 'shardflake move',
      connectTimeoutMs: 5000,
    });
  } catch (error) {
    const e = wrapPgError(error);
    throw new ShardflakeError(e.code, `server ${server}: ${e.message}`, { cause: error });
  }
}

/** Ends a client's connection at once, as a killed process would (the server rolls back its transaction). */
export function kill(client: pg.Client | undefined): void {
  const stream = (client as unknown as { connection?: { stream?: { destroy(): void } } } | undefined)
    ?.connection?.stream;
  stream?.destroy();
}

export async function checkpoint(s: Session, phase: MoveStep | null): Promise<void> {
  if (phase !== null) await s.opts.afterStep?.(phase);
  if ((phase !== null && s.opts.stopAfter === phase) || s.opts.signal?.aborted) {
    kill(s.source);
    kill(s.target);
    kill(s.catalog);
    throw new MoveInterrupted(
      `move #${s.record.id} of shard ${s.record.shard} stopped after ${phase ?? s.record.phase}; run the command again to resume or roll it back`,
    );
  }
}

export async function advance(
  s: Session,
  phase: MovePhase,
  extra: { pauseMs?: number; rowsCopied?: bigint } = {},
) {
  await recordPhase(s.catalog, s.record.id, phase, extra);
  s.record = { ...s.record, phase };
  s.opts.onProgress?.({
    shard: s.record.shard,
    moveId: s.record.id,
    phase,
    copiedRows: s.rows,
    totalRows: s.rows,
  });
  await checkpoint(s, phase);
}

export async function readPlacement(
  catalog: pg.Client,
  shard: number,
): Promise<{ server: string; schema: string; state: ShardState }> {
  const { rows } = await catalog.query(
    'SELECT server, schema_name, state FROM shardflake.shards WHERE shard = $1',
    [shard],
  );
  const row = rows[0] as { server: string; schema_name: string; state: ShardState } | undefined;
  if (!row) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      `shard ${shard} is not in the shard map; run cluster init first`,
    );
  }
  return { server: row.server, schema: row.schema_name, state: row.state };
}

export async function inTransaction<T>(client: pg.Client, work: () => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    const result = await work();
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

export async function setShardState(catalog: pg.Client, shard: number, state: ShardState, server?: string) {
  const version = await bumpMapVersion(catalog);
  await catalog.query(
    'UPDATE shardflake.shards SET state = $2, server = coalesce($3, server), changed_in_version = $4 WHERE shard = $1',
    [shard, state, server ?? null, version],
  );
  return version;
}

export async function countRows(
  client: pg.Client,
  schema: string,
  tables: readonly SourceTable[],
): Promise<bigint> {
  if (tables.length === 0) return 0n;
  const { rows } = await client.query(
    `SELECT (${tables.map((t) => `(SELECT count(*) FROM ${qualified(schema, t.name)})`).join(' + ')})::bigint AS n`,
  );
  return BigInt((rows[0] as { n: bigint }).n);
}

export async function schemaVersion(client: pg.Client, schema: string): Promise<number | null> {
  const { rows } = await client.query(
    `SELECT max(version)::int AS v FROM ${qualified(schema, MIGRATIONS_TABLE)}`,
  );
  return (rows[0] as { v: number | null }).v;
}

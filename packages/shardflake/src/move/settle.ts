import type pg from 'pg';
import { type MoveRecord, reached, recordPhase, streamId } from '../catalog/moves.js';
import { readPlacement, setShardsState } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { isFenced, unfenceSql } from '../fence/fence.js';
import { inTransaction, openServer } from './connections.js';
import { ddlPastGuard, unguardSchemas } from './ddl-guard.js';
import { finishMembers } from './finish.js';
import { DEFAULTS, SET_DEFAULTS } from './options.js';
import { dropPublication, dropSlots, dropSubscription, replicationNames } from './replication.js';
import type { Run } from './run.js';
import { dropSchema, listTables } from './tables.js';

/**
 * Ending a move that its process left unfinished: rolled back before the catalog switched, finished after. Used by
 * a rerun that targets another server and by `cluster cleanup`.
 */
/**
 * Undoes a move that has not switched: target copy and subscription dropped, source unfenced, publication and
 * slots dropped, shard active on its source. A target that cannot be reached keeps its subscription (now without
 * a slot, so it copies nothing); `cluster cleanup` drops it later. Returns what was left behind, in words.
 */
export async function rollBackMove(
  config: ClusterConfig,
  catalog: pg.Client,
  record: MoveRecord,
  reason: string,
): Promise<string[]> {
  const placement = await readPlacement(catalog, record.shard);
  if (placement.server !== record.from) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `move #${record.id} already switched shard ${record.shard} to server ${placement.server}; it can only be finished`,
    );
  }
  const names = replicationNames(streamId(record));
  // Fresh connections: the move's own may be dead or inside an aborted transaction.
  const source = await openServer(config, record.from);
  const target = await openServer(config, record.to).catch(() => undefined);
  try {
    const leftovers: string[] = [];
    try {
      if (!target) throw new Error(`server ${record.to} is unreachable`);
      await dropSubscription(target, names.subscription, true);
      await dropSchema(target, record.schema);
    } catch (error) {
      leftovers.push(
        `subscription ${names.subscription} and schema ${record.schema} on server ${record.to} (${(error as Error).message}; cluster cleanup drops them)`,
      );
    }
    if (await isFenced(source, record.schema)) await ddlPastGuard(source, unfenceSql(record.schema));
    await dropPublication(source, names.publication);
    await dropSlots(source, names.slot, record.subscriptionOid);
    await unguardSchemas(source, [record.schema]);
    await inTransaction(catalog, async () => {
      if (placement.state !== 'active') await setShardsState(catalog, [record.shard], 'active');
      await recordPhase(catalog, record.id, 'rolled_back', {
        error: [reason, ...leftovers.map((l) => `left: ${l}`)].join('; '),
      });
    });
    return leftovers;
  } finally {
    await Promise.all([source.end().catch(() => {}), target?.end().catch(() => {})]);
  }
}

/** Finishes (switched) or rolls back (otherwise) an unfinished move found in the catalog. */
export async function settleMove(
  config: ClusterConfig,
  catalog: pg.Client,
  record: MoveRecord,
  reason: string,
): Promise<'finished' | 'rolled_back'> {
  if (!reached(record.phase, 'switched')) {
    await rollBackMove(config, catalog, record, reason);
    return 'rolled_back';
  }
  const source = await openServer(config, record.from);
  const target = await openServer(config, record.to).catch(async (e) => {
    await source.end();
    throw e;
  });
  try {
    const names = replicationNames(streamId(record));
    const run: Run = {
      config,
      opts: { ...DEFAULTS, ...SET_DEFAULTS },
      catalog,
      source,
      target,
      from: record.from,
      to: record.to,
      streamId: streamId(record),
      batchId: record.batchId,
      names,
      members: [
        {
          record,
          tables: await listTables(source, record.schema),
          resumedFrom: record.phase,
          rows: 0n,
          pauseMs: null,
          pauseSteps: {},
          mapVersion: 0n,
          snapshot: null,
        },
      ],
      copy: null,
      catchUpMs: null,
      steps: {},
    };
    await finishMembers(run, run.members);
    return 'finished';
  } finally {
    await Promise.all([source.end().catch(() => {}), target.end().catch(() => {})]);
  }
}

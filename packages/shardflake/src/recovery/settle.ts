import type { ClusterConfig } from '../config/config.js';
import { type ErrorCode, ShardflakeError } from '../errors/errors.js';
import { clusterAccess, clusterIdOf } from './cluster-access.js';
import { parseGid } from './gid.js';
import {
  PREPARED_ON_INSTANCE_SQL,
  PREPARED_ON_SCHEMAS_SQL,
  type RecoveryReport,
  recoverTransactions,
} from './recovery.js';
import { TRANSACTION_DEFAULTS } from './state.js';

/**
 * Settles the prepared transactions that hold locks in some shards' schemas on one server, before work that must
 * lock those shards' tables: a move's cutover (and a fenced copy must not be left with a prepared transaction that
 * replication would only decode at COMMIT PREPARED, after the switch), or a migration's DDL.
 *
 * A prepared transaction keeps its locks until it is committed or rolled back, so that work would otherwise wait
 * for it — forever when its coordinator crashed and no router ran recovery. Here every one of this cluster's is
 * settled by its decision (recovery.ts): committed when decided, rolled back (after its tombstone) when
 * undecided and older than `inDoubtAfterMs`; a younger one is waited for — its coordinator is committing it now.
 * The wait is bounded by `timeoutMs`; past it (or for a prepared transaction that is not shardflake's, which only
 * its owner can settle) the caller gets `failWith`, naming the gids. Nothing is ever lost: settling follows the
 * decision, it never guesses.
 *
 * `schemas: 'all'` waits for every prepared transaction on the server's instance, in any database: what creating
 * a logical replication slot needs (a move's first step), since the slot's starting snapshot waits for every
 * transaction running on the instance, prepared ones included.
 *
 * Costs one query on the server when nothing is prepared there (the usual case).
 */
export interface SettleOptions {
  /** Longest wait for the shards to be free of prepared transactions (default 15 000 ms). */
  timeoutMs?: number;
  inDoubtAfterMs?: number;
  /** The error code when the wait ends with a prepared transaction left (default SHARD_BUSY). */
  failWith?: ErrorCode;
  pollMs?: number;
}

export async function settlePreparedOnShards(
  config: Pick<ClusterConfig, 'servers' | 'nodes' | 'catalog'>,
  server: string,
  schemas: readonly string[] | 'all',
  options: SettleOptions = {},
): Promise<Pick<RecoveryReport, 'committed' | 'rolledBack'>> {
  const timeoutMs = options.timeoutMs ?? 15_000;
  const inDoubtAfterMs = options.inDoubtAfterMs ?? TRANSACTION_DEFAULTS.inDoubtAfterMs;
  const settled: Pick<RecoveryReport, 'committed' | 'rolledBack'> = { committed: [], rolledBack: [] };
  if (schemas.length === 0) return settled;
  const access = clusterAccess(config, 'shardflake settle');
  try {
    const deadline = performance.now() + timeoutMs;
    let clusterId: string | null | undefined;
    for (;;) {
      const { rows } = await access.use(server, (c) =>
        schemas === 'all' ? c.query(PREPARED_ON_INSTANCE_SQL) : c.query(PREPARED_ON_SCHEMAS_SQL, [schemas]),
      );
      const held = rows as { gid: string; age_ms: number }[];
      if (held.length === 0) return settled;
      clusterId ??= await clusterIdOf(access, config.catalog);
      if (clusterId !== null && held.some((h) => parseGid(h.gid)?.cluster === clusterId)) {
        const report = await recoverTransactions(access, clusterId, { inDoubtAfterMs });
        settled.committed.push(...report.committed);
        settled.rolledBack.push(...report.rolledBack);
      }
      if (performance.now() > deadline) {
        const list = held.map((h) => `${h.gid} (${Math.round(Number(h.age_ms) / 1000)} s old)`).join(', ');
        throw new ShardflakeError(
          options.failWith ?? 'SHARD_BUSY',
          `prepared transactions on server ${server} still ${schemas === 'all' ? 'run' : "hold the shard's tables"} after ${timeoutMs} ms: ${list}; their coordinator or recovery must settle them (shardflake cluster recover), or their owner if they are not shardflake's`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 100));
    }
  } finally {
    await access.close();
  }
}

import type pg from 'pg';
import { MIGRATIONS_TABLE } from '../admin/shard-ddl.js';
import { type ClusterConfig, targetVersion } from '../config/config.js';
import { expectOption } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { qualified } from '../postgres/identifier.js';
import { checkThrottle } from './copy-stream.js';
import type { SetMoveOptions } from './options.js';
import { existingSchemas, listTablesOfSchemas, requirePrimaryKeys, type SourceTable } from './tables.js';

/** What is checked before a set starts: the list of moves, the options, each shard's placement and schema. */
/**
 * The preflight of a move, for a whole set in a few queries: logical WAL on the source,
 * every schema there with primary keys on every table and at the config's schema version, none on the target yet.
 * (Replication slots and workers are checked for the whole plan by checkReplicationLimits.)
 */
export async function preflightSet(
  config: ClusterConfig,
  shards: readonly { shard: number; schema: string }[],
  from: string,
  to: string,
  source: pg.Client,
  target: pg.Client,
): Promise<Map<number, SourceTable[]>> {
  const wal = (await source.query('SHOW wal_level')).rows[0] as { wal_level: string };
  if (wal.wal_level !== 'logical') {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `server ${from} runs with wal_level=${wal.wal_level}; shard moves need wal_level=logical`,
    );
  }
  const schemas = shards.map((s) => s.schema);
  const present = await existingSchemas(source, schemas);
  const absent = shards.filter((s) => !present.has(s.schema));
  if (absent.length > 0) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `the catalog places shard ${absent.map((s) => s.shard).join(', ')} on server ${from}, but schema ${absent.map((s) => s.schema).join(', ')} is not there`,
    );
  }
  const tables = await listTablesOfSchemas(source, schemas);
  for (const { schema } of shards) requirePrimaryKeys(schema, tables.get(schema) ?? []);
  const { rows } = await source.query(
    shards
      .map(
        (s, i) =>
          `SELECT ${i} AS i, (SELECT max(version)::int FROM ${qualified(s.schema, MIGRATIONS_TABLE)}) AS v`,
      )
      .join(' UNION ALL '),
  );
  const wanted = targetVersion(config);
  for (const r of rows as { i: number; v: number | null }[]) {
    if (r.v !== wanted) {
      throw new ShardflakeError(
        'NOT_SUPPORTED',
        `shard ${shards[r.i]?.shard} is at schema version ${r.v ?? 'unknown'} but the cluster's schema is at ${wanted}; run cluster migrate before moving it`,
      );
    }
  }
  const left = await existingSchemas(target, schemas);
  if (left.size > 0) {
    const on = shards.filter((s) => left.has(s.schema)).map((s) => s.shard);
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `server ${to} still holds a copy of shard ${on.join(', ')} left by an earlier move; run shardflake cluster cleanup first`,
    );
  }
  return new Map(shards.map((s) => [s.shard, tables.get(s.schema) ?? []]));
}

/** Refuses a list of moves with duplicates, unknown shards, unknown targets or a bad throttle, before anything starts. */
export function checkMoveList(
  config: ClusterConfig,
  moves: readonly { shard: number; to: string }[],
  options: SetMoveOptions = {},
): void {
  if (moves.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'no shard to move: the shard list is empty');
  const seen = new Set<number>();
  const twice: number[] = [];
  for (const { shard } of moves) {
    if (seen.has(shard)) twice.push(shard);
    seen.add(shard);
  }
  if (twice.length > 0) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `the shard list names shard ${[...new Set(twice)].join(', ')} more than once`,
    );
  }
  const unknown = moves
    .map((m) => m.shard)
    .filter((n) => !Number.isInteger(n) || n < 0 || n >= config.logicalShards);
  if (unknown.length > 0) {
    throw new ShardflakeError(
      'UNKNOWN_SHARD',
      `${unknown.length === 1 ? 'shard' : 'shards'} ${unknown.join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not among the cluster's ${config.logicalShards} logical shards (0–${config.logicalShards - 1})`,
    );
  }
  for (const to of new Set(moves.map((m) => m.to))) {
    if (!(to in config.servers)) {
      throw new ShardflakeError(
        'UNKNOWN_SERVER',
        `server ${JSON.stringify(to)} is not in the config (servers: ${Object.keys(config.servers).join(', ')})`,
      );
    }
  }
  checkSetOptions(options);
}

/**
 * Refuses a throttle of 0 or less, worker or group counts below 1 and timeouts that are not whole numbers of
 * milliseconds, before anything starts.
 */
export function checkSetOptions(options: SetMoveOptions): void {
  checkThrottle(options.throttle);
  for (const name of [
    'copyWorkers',
    'streamsPerServer',
    'cutoverGroupShards',
    'cutoverGroupRows',
    'cutoverAttempts',
  ] as const)
    expectOption(options[name], name, 1);
  for (const name of [
    'lockTimeoutMs',
    'cutoverTimeoutMs',
    'syncTimeoutMs',
    'replicaFenceTimeoutMs',
    'pauseBoundMs',
  ] as const)
    expectOption(options[name], name, 0);
}

/** Refuses a list of shards for one target (see checkMoveList). */
export function checkShardList(config: ClusterConfig, shards: readonly number[], to: string): void {
  checkMoveList(
    config,
    shards.map((shard) => ({ shard, to })),
  );
}

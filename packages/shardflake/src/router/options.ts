import { expectKind, expectOption, optionsObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { SqlPrepare } from '../routing/context.js';
import { SQL_PREPARE_MODES } from '../sql/prepared.js';

/** The whole-number options of createRouter and their least values (0 means "none" or "never" where allowed). */
const COUNTS: Record<string, number> = {
  poolSize: 1,
  connectTimeoutMs: 0,
  maxUses: 0,
  maxLifetimeSeconds: 0,
  shardsPerConnection: 0,
  writeRetryMs: 0,
  catalogRetryMs: 1,
  retryBackoffMs: 1,
  maxRetryBackoffMs: 1,
  lookupCacheSize: 0,
  sqlShardsPerStatement: 1,
  sqlConnectionsPerServer: 1,
};
const NESTED_COUNTS: Record<'transactions' | 'replicas', Record<string, number>> = {
  transactions: {
    recoveryIntervalMs: 1,
    recoveryDelayMs: 0,
    inDoubtAfterMs: 0,
    deadlockCheckMs: 0,
    lockTimeoutMs: 0,
    idleTimeoutMs: 0,
  },
  replicas: { maxReplicaLagMs: 0, replicaCheckMs: 1, failoverWaitMs: 0, rediscoverMs: 1, suspectMs: 0 },
};
const FLAGS = ['listen', 'checkPrivileges', 'telemetry'];
const HOOKS = ['onMapChange', 'onRetry', 'onEvent'];

/**
 * Refuses createRouter options of the wrong kind in one INVALID_ARGUMENT line naming the option, before anything
 * connects: a pool of `'10'` or `0`, a NaN timeout or a hook that is not a function would otherwise fail later and
 * far from the mistake (or not at all: pg-pool takes a pool size of 0 and never hands out a connection).
 */
export function checkRouterOptions<T extends object>(options: T | undefined): T {
  const o = optionsObject(options, 'createRouter options');
  for (const [name, min] of Object.entries(COUNTS)) expectOption(o[name], name, min);
  for (const name of FLAGS) expectKind(o[name], name, 'boolean');
  for (const name of HOOKS) expectKind(o[name], name, 'function');
  for (const [group, counts] of Object.entries(NESTED_COUNTS)) {
    const nested = optionsObject(o[group], group);
    for (const [name, min] of Object.entries(counts)) expectOption(nested[name], `${group}.${name}`, min);
  }
  expectKind(optionsObject(o.transactions, 'transactions').recovery, 'transactions.recovery', 'boolean');
  if (o.sqlPrepare !== undefined && !SQL_PREPARE_MODES.includes(o.sqlPrepare as SqlPrepare))
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `sqlPrepare must be one of ${SQL_PREPARE_MODES.map((m) => `'${m}'`).join(', ')}, not ${shown(o.sqlPrepare)}`,
    );
  return o as T;
}

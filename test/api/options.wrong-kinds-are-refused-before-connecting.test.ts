import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  createRestorePoint,
  createRouter,
  initCluster,
  isShardflakeError,
  migrateCluster,
  moveShard,
  rebalanceCluster,
  validateConfig,
} from 'shardflake';

/**
 * Options are checked before anything connects: a wrong kind is one INVALID_ARGUMENT line naming the option. The
 * config points at a port nothing listens on, so an option that slipped through would show up as
 * SERVER_UNREACHABLE instead (the valid-options cases prove the config fails that way).
 */
const nowhere = validateConfig(
  {
    servers: { a: 'postgres://app@127.0.0.1:1/app', b: 'postgres://app@127.0.0.1:1/other' },
    catalog: 'a',
    logicalShards: 4,
    tables: { t: 'CREATE TABLE t (id bigint PRIMARY KEY)' },
  },
  'nowhere',
);

const refusals: [options: unknown, message: RegExp][] = [
  ['fast', /^createRouter options must be an object, not a string$/],
  [{ poolSize: 0 }, /^poolSize must be a whole number of at least 1, not 0$/],
  [{ poolSize: '10' }, /^poolSize must be a whole number of at least 1, not "10"$/],
  [{ poolSize: 2.5 }, /^poolSize must be a whole number of at least 1, not 2.5$/],
  [
    { connectTimeoutMs: Number.NaN },
    /^connectTimeoutMs must be a whole number from 0 to 2147483647, not NaN$/,
  ],
  // Past what a Node timer holds, a timeout would fire after 1 ms.
  [
    { connectTimeoutMs: 2 ** 31 },
    /^connectTimeoutMs must be a whole number from 0 to 2147483647, not 2147483648$/,
  ],
  [{ maxLifetimeSeconds: 3e6 }, /^maxLifetimeSeconds must be a whole number from 0 to 2147483, not 3000000$/],
  [{ writeRetryMs: -1 }, /^writeRetryMs must be a whole number from 0 to 2147483647, not -1$/],
  [{ maxRetryBackoffMs: 0 }, /^maxRetryBackoffMs must be a whole number from 1 to 2147483647, not 0$/],
  [{ lookupCacheSize: -1 }, /^lookupCacheSize must be a whole number of at least 0, not -1$/],
  [{ listen: 'no' }, /^listen must be a boolean, not a string$/],
  [{ onEvent: {} }, /^onEvent must be a function, not an object$/],
  [{ transactions: [] }, /^transactions must be an object, not an array$/],
  [{ transactions: { recovery: 1 } }, /^transactions\.recovery must be a boolean, not a number$/],
  [
    { transactions: { inDoubtAfterMs: -5 } },
    /^transactions\.inDoubtAfterMs must be a whole number from 0 to /,
  ],
  [{ replicas: { maxReplicaLagMs: '1s' } }, /^replicas\.maxReplicaLagMs must be a whole number from 0 to /],
  [{ transactions: { lockTimeoutMs: -1 } }, /^transactions\.lockTimeoutMs must be a whole number from 0 to /],
  [
    { transactions: { idleTimeoutMs: 1.5 } },
    /^transactions\.idleTimeoutMs must be a whole number from 0 to /,
  ],
  [
    { transactions: { deadlockCheckMs: '1s' } },
    /^transactions\.deadlockCheckMs must be a whole number from 0 to /,
  ],
];

it('createRouter: each option of the wrong kind is INVALID_ARGUMENT naming it, before any connection', async () => {
  for (const [options, message] of refusals) {
    await assert.rejects(createRouter(nowhere, options as never), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'INVALID_ARGUMENT'), `${JSON.stringify(options)}: ${String(e)}`);
      assert.match(e.message, message);
      return true;
    });
  }
});

it('createRouter: valid options go on to connect (and find nothing at that port)', async () => {
  await assert.rejects(
    createRouter(nowhere, { poolSize: 2, connectTimeoutMs: 0, listen: false, onEvent: () => {} }),
    (e: unknown) => isShardflakeError(e, 'SERVER_UNREACHABLE'),
  );
});

const commands: [name: string, run: (options: never) => Promise<unknown>, bad: unknown[], good: unknown][] = [
  [
    'initCluster',
    (o) => initCluster(nowhere, o),
    [{ batchSize: 0 }, { connectionsPerServer: '2' }],
    { batchSize: 100, connectionsPerServer: 1 },
  ],
  [
    'migrateCluster',
    (o) => migrateCluster(nowhere, o),
    [{ connectionsPerServer: 0 }, { shardLockWaitMs: -1 }, { parallelBuilds: Number.POSITIVE_INFINITY }],
    { connectionsPerServer: 1, shardLockWaitMs: 0, parallelBuilds: 1 },
  ],
  [
    'moveShard',
    (o) => moveShard(nowhere, 0, 'b', o),
    [
      { copyWorkers: 0 },
      { cutoverAttempts: 1.5 },
      { pauseBoundMs: -1 },
      { lockTimeoutMs: '2s' },
      { syncTimeoutMs: 2 ** 31 },
    ],
    { copyWorkers: 2, cutoverAttempts: 1, pauseBoundMs: 0 },
  ],
  [
    'createRestorePoint',
    (o) => createRestorePoint(nowhere, 'nightly-1', o),
    [{ lockTimeoutMs: 0 }, { attempts: 1.5 }, { lockTimeoutMs: 2 ** 31 }],
    { lockTimeoutMs: 10, attempts: 1 },
  ],
  [
    'rebalanceCluster',
    (o) => rebalanceCluster(nowhere, { move: o }),
    [{ cutoverGroupRows: 0 }, { replicaFenceTimeoutMs: Number.NaN }],
    { cutoverGroupRows: 10 },
  ],
];

for (const [name, run, bad, good] of commands) {
  it(`${name}: counts and durations that are not whole numbers in range are refused by name, before connecting`, async () => {
    for (const options of bad) {
      const option = Object.keys(options as object)[0] as string;
      await assert.rejects(run(options as never), (e: unknown) => {
        assert.ok(isShardflakeError(e, 'INVALID_ARGUMENT'), `${name} ${option}: ${String(e)}`);
        assert.match(e.message, new RegExp(`^${option} must be a whole number (of at least|from) \\d+`));
        return true;
      });
    }
    await assert.rejects(run(good as never), (e: unknown) => isShardflakeError(e, 'SERVER_UNREACHABLE'));
  });
}

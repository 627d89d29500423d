import assert from 'node:assert/strict';
import { it } from 'node:test';
import { createRouter, isShardflakeError, validateConfig } from 'shardflake';

/**
 * createRouter's options are checked before it connects: a wrong kind is one INVALID_ARGUMENT line naming the
 * option. The config points at a port nothing listens on, so an option that slipped through would show up as
 * SERVER_UNREACHABLE instead (the last case proves the config fails that way).
 */
const nowhere = validateConfig(
  {
    servers: { a: 'postgres://app@127.0.0.1:1/app' },
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
  [{ connectTimeoutMs: Number.NaN }, /^connectTimeoutMs must be a whole number of at least 0, not NaN$/],
  [{ writeRetryMs: -1 }, /^writeRetryMs must be a whole number of at least 0, not -1$/],
  [{ maxRetryBackoffMs: 0 }, /^maxRetryBackoffMs must be a whole number of at least 1, not 0$/],
  [{ listen: 'no' }, /^listen must be a boolean, not a string$/],
  [{ onEvent: {} }, /^onEvent must be a function, not an object$/],
  [{ transactions: [] }, /^transactions must be an object, not an array$/],
  [{ transactions: { recovery: 1 } }, /^transactions\.recovery must be a boolean, not a number$/],
  [
    { transactions: { inDoubtAfterMs: -5 } },
    /^transactions\.inDoubtAfterMs must be a whole number of at least 0/,
  ],
  [
    { replicas: { maxReplicaLagMs: '1s' } },
    /^replicas\.maxReplicaLagMs must be a whole number of at least 0/,
  ],
];

it('each option of the wrong kind is INVALID_ARGUMENT naming it, before any connection', async () => {
  for (const [options, message] of refusals) {
    await assert.rejects(createRouter(nowhere, options as never), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'INVALID_ARGUMENT'), `${JSON.stringify(options)}: ${String(e)}`);
      assert.match(e.message, message);
      return true;
    });
  }
});

it('valid options go on to connect (and find nothing at that port)', async () => {
  await assert.rejects(
    createRouter(nowhere, { poolSize: 2, connectTimeoutMs: 0, listen: false, onEvent: () => {} }),
    (e: unknown) => isShardflakeError(e, 'SERVER_UNREACHABLE'),
  );
});

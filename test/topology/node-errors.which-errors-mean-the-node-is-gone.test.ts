import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { isNodeFailure } from '../../packages/shardflake/src/topology/node-errors.js';

test('errors that mean a node is gone or not the primary, and errors that are the operation’s own', () => {
  const gone = [
    Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
    Object.assign(new Error('cannot execute INSERT in a read-only transaction'), { code: '25006' }),
    Object.assign(new Error('the database system is starting up'), { code: '57P03' }),
    Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
    Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
    new Error('Connection terminated unexpectedly'),
    new ShardflakeError('SERVER_UNREACHABLE', 'unreachable', {
      cause: Object.assign(new Error('x'), { code: 'ECONNREFUSED' }),
    }),
    new ShardflakeError('DATABASE_ERROR', 'read only', { sqlState: '25006' }),
  ];
  for (const e of gone) assert.equal(isNodeFailure(e), true, String(e));
  const own = [
    Object.assign(new Error('duplicate key value violates unique constraint'), { code: '23505' }),
    Object.assign(new Error('could not serialize access'), { code: '40001' }),
    Object.assign(new Error('relation "t" does not exist'), { code: '42P01' }),
    new ShardflakeError('SHARD_FENCED', 'fenced', { sqlState: 'SF001' }),
    'a string',
    undefined,
  ];
  for (const e of own) assert.equal(isNodeFailure(e), false, String(e));
});

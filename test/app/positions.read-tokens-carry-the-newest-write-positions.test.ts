import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { compareLsn, ReadPositions } from '../../packages/shardflake/src/routing/positions.js';

test('LSNs compare as the 64-bit numbers they print, not as text', () => {
  assert.equal(compareLsn('0/FF', '0/100'), -1);
  assert.equal(compareLsn('1/0', '0/FFFFFFFF'), 1);
  assert.equal(compareLsn('16/B374D848', '16/B374D848'), 0);
  assert.equal(compareLsn('A/0', '9/FFFFFFFF'), 1);
});

test('a read token carries the newest position per server, and a reader takes the newer of its own and the token', () => {
  const writer = new ReadPositions();
  writer.note('a', '0/100');
  writer.note('a', '0/FF'); // older: ignored
  writer.note('b', '2/0');
  const token = writer.toToken();
  const fromToken = ReadPositions.fromToken(token);
  assert.equal(fromToken.get('a'), '0/100');
  assert.equal(fromToken.get('b'), '2/0');

  const reader = new ReadPositions();
  reader.note('a', '0/200');
  assert.equal(reader.after('a', fromToken), '0/200');
  assert.equal(reader.after('b', fromToken), '2/0');
  assert.equal(reader.after('c', fromToken), undefined);
  reader.merge(fromToken);
  assert.equal(reader.get('b'), '2/0');
  assert.equal(reader.get('a'), '0/200');
});

test('a token that is not one a router made is refused with INVALID_ARGUMENT', () => {
  const bad = [
    'not base64 json',
    Buffer.from('{"v":2,"p":{}}').toString('base64url'),
    Buffer.from('{"v":1,"p":{"a":"DROP TABLE"}}').toString('base64url'),
    Buffer.from('{"v":1}').toString('base64url'),
  ];
  for (const token of bad)
    assert.throws(
      () => ReadPositions.fromToken(token),
      (e: unknown) => isShardflakeError(e, 'INVALID_ARGUMENT'),
    );
});

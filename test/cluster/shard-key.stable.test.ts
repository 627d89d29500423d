import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blake2s } from '@noble/hashes/blake2.js';
import fc from 'fast-check';
import { hashKey, shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';

describe('shard key → logical shard', () => {
  it('maps integers by modulo, as the seeds do (user 5001 on 2000 shards → 1001)', () => {
    assert.equal(shardForKey(5001, 2000), 1001);
    assert.equal(shardForKey(5001n, 2000), 1001);
    assert.equal(shardForKey(31341, 2000), 1341);
    assert.equal(shardForKey(-1, 16), 15);
    assert.equal(shardForKey(2n ** 63n - 1n, 8192), 8191);
  });

  it('hashes strings with BLAKE2s-256, first 8 digest bytes big-endian, mod shards', () => {
    const digest = blake2s(new TextEncoder().encode('alice@example.com'));
    const expected = [...digest.slice(0, 8)].reduce((v, b) => (v << 8n) | BigInt(b), 0n);
    assert.equal(hashKey('alice@example.com'), expected);
    assert.equal(shardForKey('alice@example.com', 8192), Number(expected % 8192n));
    // RFC 7693 appendix B vector for BLAKE2s-256("abc"), so the hash is the standard one.
    assert.equal(
      Buffer.from(blake2s(new TextEncoder().encode('abc')))
        .toString('hex')
        .slice(0, 16),
      '508c5e8c327c14e2',
    );
    assert.equal(hashKey('abc'), 0x508c5e8c327c14e2n);
  });

  it('always lands inside 0..shards-1 and is stable for every key type', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.bigInt(), fc.integer(), fc.string(), fc.uint8Array()),
        fc.integer({ min: 1, max: 8192 }),
        (key, n) => {
          const shard = shardForKey(key, n);
          return Number.isInteger(shard) && shard >= 0 && shard < n && shard === shardForKey(key, n);
        },
      ),
    );
  });

  it('refuses unsafe numbers instead of rounding them', () => {
    assert.throws(() => shardForKey(2 ** 60, 16), /not a safe integer/);
  });
});

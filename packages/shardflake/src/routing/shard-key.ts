import { blake2s } from '@noble/hashes/blake2.js';
import { kindOf, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { NotAnId } from '../ids/id.js';

/**
 * Shard key → logical shard.
 *
 * - Integer keys (`number` that is a safe integer, or `bigint`): `key mod logicalShards`, as in the Instagram post
 *   ("user_id % 2000"). Negative keys use the non-negative remainder, so -1 goes to the last shard.
 * - Every other key (`string`, `Uint8Array`): BLAKE2s-256 (RFC 7693, no key, 32-byte digest) of the key's bytes
 *   (UTF-8 for strings), the first 8 digest bytes read as an unsigned big-endian 64-bit integer, mod
 *   logicalShards. A string is hashed even when it looks like a number ("42" and 42 may land on different shards):
 *   the type of the key decides, never its content.
 *
 * Both rules depend only on the key and the shard count, so every router, language and version agrees.
 *
 * A `ShardflakeId` is not a ShardKey (the compiler says "Type 'ShardflakeId' is not assignable to type 'ShardKey'"):
 * an id routes by the shard in its bits, with `{ id }`, and routing it as a key would pick another shard.
 */
export type ShardKey = number | (bigint & NotAnId) | string | Uint8Array;

/** The 64-bit hash that places a string or byte key: the first 8 bytes of its BLAKE2s-256 digest, big-endian. */
export function hashKey(key: string | Uint8Array): bigint {
  if (typeof key !== 'string' && !(key instanceof Uint8Array)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `a key to hash must be a string or bytes, not ${kindOf(key)}`,
    );
  }
  const bytes = typeof key === 'string' ? new TextEncoder().encode(key) : key;
  const digest = blake2s(bytes);
  let value = 0n;
  for (let i = 0; i < 8; i++) value = (value << 8n) | BigInt(digest[i] as number);
  return value;
}

/**
 * The logical shard of a shard key: an integer key modulo the shard count, any other key by its hash (see
 * `ShardKey`).
 */
export function shardForKey(key: ShardKey, logicalShards: number): number {
  if (!Number.isSafeInteger(logicalShards) || logicalShards < 1) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `logicalShards must be a whole number from 1, not ${shown(logicalShards)}`,
    );
  }
  const n = BigInt(logicalShards);
  let value: bigint;
  if (typeof key === 'bigint') value = key;
  else if (typeof key === 'number') {
    if (!Number.isSafeInteger(key)) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `shard key ${key} is not a safe integer; pass a bigint or a string`,
      );
    }
    value = BigInt(key);
  } else if (typeof key === 'string' || key instanceof Uint8Array) value = hashKey(key);
  else {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `shard key must be an integer, bigint, string or bytes, not ${kindOf(key)}`,
    );
  }
  return Number(((value % n) + n) % n);
}

import { ShardflakeError } from '../errors/errors.js';

/**
 * The type of an id made by a shardflake cluster: a `bigint` at run time, branded at compile time.
 *
 * Why a brand: an id and a shard key are both bigints, and they route differently — an id by the shard named in its
 * shard bits, a key by `key mod logicalShards` (or a hash). Passing one where the other is meant reads or writes
 * the wrong shard without any error (0 rows, or rows on 3 of 128 shards). With the brand:
 * - the router returns `ShardflakeId` (insert, insertMany, FeedPage.next) and asks for it (get, update, delete,
 *   shardOfId, `{ id }` targets, feeds with `keysAreIds: true`);
 * - a `ShardflakeId` is not a `ShardKey`, so `{ key: id }` and `insert(…, { key: id })` do not compile;
 * - a plain `bigint` is not a `ShardflakeId`, so `{ id: userKey }` does not compile: an id that comes from outside
 *   (a URL, a column typed `bigint`) is claimed with `asId(value)`, once, where it enters the program.
 *
 * The brand is a property that exists only in the type (`unique symbol`), so nothing changes at run time: ids stay
 * primitives, compare with `===`, serialize as before. JavaScript callers get the run-time checks instead
 * (`asId` and every routed call refuse what cannot be an id of the cluster; see `shardOfIdIn`).
 */
declare const shardflakeId: unique symbol;

/** What a compiler error shows when an id and a key are mixed up. */
type IdBrand = 'ShardflakeId: route an id with { id }, a key with { key }; claim a bigint with asId(value)';

/**
 * A 64-bit id that says which logical shard holds its row: a `bigint` branded in the type only, so that the
 * compiler refuses to route it as a shard key (`{ key }`) instead of by its bits (`{ id }`). The router returns
 * them; `asId(value)` claims one from outside.
 */
export type ShardflakeId = bigint & {
  /** Present only in the type: a ShardflakeId comes from the router, or from asId(value). */
  readonly [shardflakeId]: IdBrand;
};

/** A bigint that is not a ShardflakeId: how `ShardKey` keeps ids out (an id routes by its bits, not by modulo). */
export type NotAnId = {
  /** Never present: a value whose type has the ShardflakeId brand does not match. */
  readonly [shardflakeId]?: never;
};

/** Largest value an id can have: ids are stored in PostgreSQL's signed `bigint`. */
const MAX_ID = (1n << 63n) - 1n;

/**
 * Claims that a value is a shardflake id: a `bigint`, or its decimal text (as it comes in a URL or JSON), from 0 to
 * 2^63 − 1. It does not know the cluster: the router checks the id's shard bits when the id is used.
 */
export function asId(value: bigint | string): ShardflakeId {
  let id: bigint;
  if (typeof value === 'bigint') id = value;
  else if (typeof value === 'string' && /^\d{1,19}$/.test(value)) id = BigInt(value);
  else
    throw new ShardflakeError(
      'INVALID_ID',
      typeof value === 'string'
        ? `${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)} is not an id (decimal digits)`
        : `an id is a bigint or its decimal text, not ${value === null ? 'null' : typeof value}`,
    );
  if (id < 0n || id > MAX_ID)
    throw new ShardflakeError(
      'INVALID_ID',
      `${id} is not an id: ids are from 0 to 2^63 - 1 (a signed bigint)`,
    );
  return id as ShardflakeId;
}

/** Claims many ids at once (see asId). */
export function asIds(values: readonly (bigint | string)[]): ShardflakeId[] {
  if (!Array.isArray(values))
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `asIds needs a list of ids, not ${values === null ? 'null' : typeof values}`,
    );
  return values.map((v, i) => {
    try {
      return asId(v);
    } catch (error) {
      throw new ShardflakeError('INVALID_ID', `ids[${i}]: ${(error as Error).message}`);
    }
  });
}

import type { LookupDefinition } from '../config/lookups.js';
import { qualified } from '../postgres/identifier.js';
import { NONE_PREPARED_FUNCTION, valueTextSql } from './ddl.js';

/**
 * The owner cache: for unique lookups, value → the logical shard of the row that held it when last found, so a
 * warm `router.lookup` is one read instead of two (entry, then owner).
 *
 * What a hit does. In the cached shard S, on S's current server by the router's map, one statement reads the rows
 * whose column holds the value (`column::text = v`, through the owner index, ddl.ts), keeping only a row version
 * that no prepared transaction may be replacing: `xmax = 0` (no transaction has updated, deleted or locked this
 * version), or no prepared transaction on the server when the statement checks. A standby cannot tell (it lists
 * none while it replays the primary's as in progress), so on a replica only `xmax = 0` is taken. Exactly one row whose id's
 * shard bits name S is the answer; anything else (no row, several, the filter) is a miss: the value leaves the
 * cache and the lookup reads the entry as it always does (read.ts), caching the owner it finds.
 *
 * Why a hit is the right row. Terms: a transaction is *decided* when its commit is durable on its decision server
 * — the local COMMIT of a one-server transaction, or the last agent's COMMIT of a cross-server one
 * (transactions/cross.ts). D(t) is the state made by every transaction decided by time t; V_S(t) is what S's
 * server shows at t (the transactions committed there). maintain.ts proves, for committed states and so for every
 * D(t), that at most one row holds v (the entry's primary key, and rows and entries changing together).
 *  1. Every transaction committed on S is decided (a local commit is a decision; COMMIT PREPARED follows one), so
 *     V_S(t) differs from D(t), on S, only by decided transactions still prepared on S at t.
 *  2. A row lives in one shard: all of its history is in S. So if row r's version in V_S(t) holds v, and no
 *     transaction prepared on S at t has written r, r holds v in D(t) — and by uniqueness r is the value's one
 *     owner at t.
 *  3. A transaction that updates or deletes r stamps its xid into the `xmax` of the version it replaces (inside a
 *     multixact when others lock the row too) before it can prepare or commit. So a version read with `xmax = 0`
 *     had no writer, prepared or not, when it was read: case 2 holds at that moment. A version with `xmax ≠ 0` is
 *     kept only when the statement, after its snapshot, finds no prepared transaction on the server: a writer
 *     prepared at the snapshot has committed or rolled back by then.
 * The one gap is inside a single statement: a cross-server transaction that rewrote r, prepared on S when the
 * snapshot was taken and committed there before the check (microseconds). The answer is then r as S showed it at
 * a moment during the call — the guarantee of the entry path and of `router.get` (atomic, not isolated: a reader
 * on S sees such a commit a moment after a reader on its decision server), never a row that did not hold the value
 * in its shard. What the filter closes is the long version of that gap: a transaction left prepared after its
 * decision (its coordinator died; recovery settles it within its interval) keeps the row's old version visible on
 * S for as long, while its entry change may be committed on the value's shard and the value re-claimed by another
 * row. A hit on such a row is a miss, and the entry path answers (the new owner, or null).
 *
 * The rest of the cases fall out of the read itself: an owner that changed the value, or was deleted, has no row
 * holding v in S (a miss); another row of S that claimed v since is the owner by 2; a claimer on another shard is
 * found by the entry after the miss. Moves: the cache holds logical shards, and S is read on its current server
 * by the router's map, as every read is; a stale map reads the old copy as of its cutover, as `router.get` would,
 * until the router learns the new map (NOTIFY, or the first write that meets the fence). Replicas: a lookup may
 * read a replica (as it always could, within the router's read-your-writes and lag bounds); D(t) and V_S(t) are
 * then as of what the replica has replayed, and 3 holds there with its stricter check.
 *
 * Memory: at most `size` values (least recently used first out), each of at most MAX_CACHED_VALUE characters;
 * longer values are never cached. Only a router created with `lookupCacheSize > 0` and lookups whose owner index
 * is built everywhere (catalog `owner_index`) use it.
 */
export const MAX_CACHED_VALUE = 256;

/** The LRU map behind the cache: insertion order is recency, the oldest key is the first one. */
export class OwnerCache {
  readonly #shards = new Map<string, number>();
  constructor(readonly size: number) {}

  get(lookup: string, value: string): number | undefined {
    const key = `${lookup}\0${value}`;
    const shard = this.#shards.get(key);
    if (shard !== undefined) {
      this.#shards.delete(key);
      this.#shards.set(key, shard);
    }
    return shard;
  }

  set(lookup: string, value: string, shard: number): void {
    if (this.size === 0 || value.length > MAX_CACHED_VALUE) return;
    const key = `${lookup}\0${value}`;
    this.#shards.delete(key);
    this.#shards.set(key, shard);
    if (this.#shards.size > this.size) {
      const oldest = this.#shards.keys().next().value as string;
      this.#shards.delete(oldest);
    }
  }

  delete(lookup: string, value: string): void {
    this.#shards.delete(`${lookup}\0${value}`);
  }

  /** How many values are cached now. */
  get length(): number {
    return this.#shards.size;
  }
}

/**
 * The hit's statement in one shard (see the top): the row (`*`) or its id, by value, not being replaced. The
 * check of prepared transactions (of any database on the server: one of another database costs a miss, never a
 * wrong row) is the shard's `_shardflake_none_prepared()` (ddl.ts), called only for a version whose xmax is set:
 * written inline as `NOT EXISTS (SELECT FROM pg_prepared_xact())`, its subquery would be planned on every call,
 * ≈ 0.02 ms, a tenth of the whole read.
 */
export function ownerByValueSql(schema: string, lookup: LookupDefinition, fetch: boolean): string {
  return `SELECT ${fetch ? 'o.*' : 'o.id'} FROM ${qualified(schema, lookup.table)} o
 WHERE ${valueTextSql(lookup, 'o')} = $1 AND (o.xmax = '0' OR ${qualified(schema, NONE_PREPARED_FUNCTION)}())`;
}

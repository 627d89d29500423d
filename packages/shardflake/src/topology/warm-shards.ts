import type pg from 'pg';
import type { IdlePreference } from './nodes.js';

/**
 * Which shards each pooled connection has touched, so that a connection stays warm on a slice of its server's
 * shards instead of caching all of them.
 *
 * Why: a PostgreSQL backend keeps what it loaded for every table and function it touched for as long as it lives
 * — relation cache entries, and above all each shard's own `next_id()` and its slow path (PL/pgSQL per schema,
 * with their cached plans). Measured on PostgreSQL 18 with the bench's orders table: ≈ 155 kB of private memory
 * per shard a backend inserted into and read from, so a pooled connection that has served every shard of a
 * server of 2,048 shards holds ≈ 320 MB, and a pool of 10 per router holds ten of them. (Generator version 6 shares
 * the slow path between a database's shards: ≈ 70–84 kB per shard written, docs/benchmarks.md.)
 *
 * Two rules bound that without giving up the pool:
 * 1. Affinity: a lease for shard s prefers an idle connection that has touched s before (its caches are warm),
 *    else the idle connection that has touched the fewest shards. With a pool of P connections, random keys over
 *    a server's n shards settle into P slices of about n / P shards each, and no connection loads another's.
 * 2. A bound: a connection that has touched more than `bound` distinct shards is closed when it is released (the
 *    pool opens a fresh one when it needs one). With n / P below the bound, affinity alone keeps every connection
 *    under it and nothing is closed; above it (or under contention, when a shard's warm connection is busy and
 *    another one serves it), connections are replaced at a rate the bound sets.
 *
 * What counts as a touch is what the caller says (`NodeLease.touch`): the shards of point operations, sessions and
 * writes. router.sql's pieces, which read 64 shards at a time, do not count: a read caches the table's relation
 * entries only (≈ 14 kB per shard, measured the same way), and counting them would close a connection after a few
 * pieces.
 *
 * Affinity reorders pg-pool's idle list (`_idle`, last item handed out first) before a checkout. That list is not
 * pg-pool's public API: when it is not there (another pg-pool), checkouts take whatever the pool gives and only
 * the bound applies. test/topology/pool.connections-stay-warm-on-a-slice-of-shards.test.ts holds the behaviour.
 */
/**
 * The default bound: ≈ 17 MB of a backend's private memory at ≈ 84 kB per shard written (generator version 6) plus
 * its base. At 8,192 shards on 4 servers with pools of 10 the slices are ≈ 205 shards, so connections are replaced
 * now and then (measured: one per ≈ 340 operations with 10 callers, against one per ≈ 490 at 256, whose largest
 * backend reached 19.4–24 MB; docs/benchmarks.md, "Connections warm on a slice of shards").
 */
export const DEFAULT_SHARDS_PER_CONNECTION = 200;

export class WarmShards {
  readonly #touched = new WeakMap<pg.ClientBase, Set<number>>();

  /** `bound`: the most distinct shards a connection may touch before it is replaced (0: no bound). */
  constructor(readonly bound: number) {}

  /** Records that `client` touched `shards`. */
  touch(client: pg.ClientBase, shards: number | Iterable<number>): void {
    let set = this.#touched.get(client);
    if (!set) {
      set = new Set();
      this.#touched.set(client, set);
    }
    if (typeof shards === 'number') set.add(shards);
    else for (const shard of shards) set.add(shard);
  }

  /** The number of distinct shards `client` has touched. */
  count(client: pg.ClientBase): number {
    return this.#touched.get(client)?.size ?? 0;
  }

  /** True when `client` has touched more shards than the bound: it should be closed, not pooled again. */
  spent(client: pg.ClientBase): boolean {
    return this.bound > 0 && this.count(client) > this.bound;
  }

  /**
   * Puts the idle connection best for the lease where pg-pool will hand it over: the most recently used one that
   * `prefers`, else one that touched `shard`, else the one that touched the fewest shards (with no shard given,
   * pg-pool's own order). Called right before `pool.connect()`.
   *
   * pg-pool serves waiting requests first come, first served, from the end of its idle list, and only on the
   * next tick: leases asked for in the same tick (router.sql's pieces, a scatter read) would each move their
   * choice to the end and all but the last get another's. So the choice goes to the slot this request will be
   * served from — below the ones already promised to the requests queued before it — and is made among the
   * connections not promised to them. Nothing changes when no choice is left.
   */
  prefer(pool: pg.Pool, { shard, prefers }: IdlePreference): void {
    const internals = pool as unknown as {
      _idle?: { client: pg.ClientBase }[];
      _pendingQueue?: unknown[];
    };
    const idle = internals._idle;
    if (!Array.isArray(idle)) return;
    const slot = idle.length - 1 - (internals._pendingQueue?.length ?? 0);
    if (slot < 1) return;
    let best = slot;
    let wanted = -1;
    if (prefers)
      for (let i = slot; i >= 0 && wanted < 0; i--) if (prefers(idle[i]?.client as pg.ClientBase)) wanted = i;
    if (wanted >= 0) best = wanted;
    else if (shard !== undefined) best = this.#forShard(idle, slot, shard);
    if (best === slot) return;
    const [item] = idle.splice(best, 1);
    idle.splice(slot, 0, item as { client: pg.ClientBase });
  }

  /** Among `idle[0..slot]`: one that touched `shard`, else the one that touched the fewest shards. */
  #forShard(idle: { client: pg.ClientBase }[], slot: number, shard: number): number {
    let best = slot;
    let fewest = Number.POSITIVE_INFINITY;
    for (let i = slot; i >= 0; i--) {
      const set = this.#touched.get((idle[i] as { client: pg.ClientBase }).client);
      if (set?.has(shard)) return i;
      const size = set?.size ?? 0;
      if (size < fewest) {
        fewest = size;
        best = i;
      }
    }
    return best;
  }
}

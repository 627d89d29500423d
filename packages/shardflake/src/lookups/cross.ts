import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import type { BatchStatement } from '../postgres/batch.js';
import type { RouterContext } from '../routing/context.js';
import { placementIn } from '../routing/map.js';
import type { ShardSession } from '../routing/session.js';
import type { CrossInternals, CrossTransaction, ServerSession } from '../transactions/cross.js';
import {
  type Change,
  changesOf,
  entryStatements,
  type NoticeWatch,
  netChanges,
  takeChanges,
  takeChangesSql,
  watchNotices,
} from './maintain.js';

/**
 * Steps 2–3 of maintain.ts on a cross-server transaction: every session the transaction joins is watched for the
 * capture trigger's notice, and one `beforeCommit` hook applies the changes of every joined shard on a server
 * that announced some, joining each entry shard h(v) as one more participant. The transaction's commit then makes
 * the rows and their entries durable together: one local COMMIT when all of them share a server, two-phase commit
 * (with the decision in the last agent's commit) otherwise.
 *
 * Connections. When the hook runs, the transaction already holds a connection on each server it wrote; an entry on
 * another server needs one more. Taken from the same pools, two transactions could each hold the last connection
 * of one server and wait for the other's (or a background recovery pass the last one): a deadlock no database
 * sees. So participants joined while committing come from a second set of pools (`commitNodes`, used by cross.ts
 * for joins made in its hooks), and the hook takes them in server-name order, all before writing anything:
 * a transaction waits for a commit-pool connection only while holding ordinary ones and commit-pool ones of
 * servers earlier in the order, never the reverse, so no cycle of waits can form.
 */
export interface KeptTransaction extends CrossInternals {
  /**
   * One statement in the placement's shard, in one round trip with the read of the change table its capture
   * triggers wrote (and the transaction's BEGIN): the commit then needs no read of that shard's changes. For the
   * router's single-row calls on a table with a lookup (routing/rows.ts).
   */
  writeKept(placement: ShardPlacement, text: string, values: unknown[]): Promise<pg.QueryResult>;
}

export function keepLookups(ctx: RouterContext, tx: CrossInternals): KeptTransaction {
  return new Kept(ctx, tx);
}

/**
 * The transaction with the lookups kept: its own join, writeKept, commit and rollback, the rest passed to `tx`. A
 * class, not `Object.create(tx)` with methods assigned: one is made per transaction, and an object used as a
 * prototype once is slow to make so (V8 turns it into a prototype) — it showed in withShards' profile.
 */
class Kept implements KeptTransaction {
  readonly #watches = new Map<string, NoticeWatch>();
  readonly #joined = new Map<number, { server: string; schema: string }>();
  // Shards a session may have written since their changes were last taken.
  readonly #dirty = new Set<number>();
  readonly #taken: Change[] = [];
  #hooked = false;

  constructor(
    readonly ctx: RouterContext,
    readonly tx: CrossInternals,
  ) {}

  get txid() {
    return this.tx.txid;
  }
  get servers() {
    return this.tx.servers;
  }
  get outcome() {
    return this.tx.outcome;
  }
  get victim() {
    return this.tx.victim;
  }
  get failedAt() {
    return this.tx.failedAt;
  }
  get nodeGone() {
    return this.tx.nodeGone;
  }

  async join(placement: ShardPlacement): Promise<ShardSession> {
    const session = await this.tx.join(placement);
    // Only the first session of a server is watched: its notices are the connection's, shared by the others.
    this.#hook(placement, this.#watches.has(placement.server) ? undefined : session.client);
    this.#dirty.add(placement.shard);
    return session;
  }

  joinServer(server: string, searchPath: readonly string[]): Promise<ServerSession> {
    return this.tx.joinServer(server, searchPath);
  }

  batch(placement: ShardPlacement, statements: readonly BatchStatement[]): Promise<pg.QueryResult[]> {
    return this.tx.batch(placement, statements);
  }

  defer(placement: ShardPlacement, statement: BatchStatement): Promise<void> {
    return this.tx.defer(placement, statement);
  }

  beforeCommit(hook: (tx: CrossTransaction) => Promise<void>): void {
    this.tx.beforeCommit(hook);
  }

  async writeKept(placement: ShardPlacement, text: string, values: unknown[]): Promise<pg.QueryResult> {
    const [result, changes] = await this.tx.batch(placement, [
      { text, values },
      { text: takeChangesSql(placement.schema) },
    ]);
    this.#hook(placement, undefined);
    this.#taken.push(...changesOf((changes as pg.QueryResult).rows));
    return result as pg.QueryResult;
  }

  commit(): Promise<void> {
    return this.tx.commit().finally(() => this.#stop());
  }

  rollback(): Promise<void> {
    return this.tx.rollback().finally(() => this.#stop());
  }

  #stop(): void {
    for (const watch of this.#watches.values()) watch.stop();
    this.#watches.clear();
  }

  #hook(placement: ShardPlacement, client: pg.PoolClient | undefined): void {
    if (!this.#joined.has(placement.shard)) this.#joined.set(placement.shard, placement);
    if (client && !this.#watches.has(placement.server))
      this.#watches.set(placement.server, watchNotices(client));
    if (!this.#hooked) {
      this.#hooked = true;
      this.tx.beforeCommit((cross) => this.#apply(cross));
    }
  }

  async #apply(cross: CrossTransaction): Promise<void> {
    // Nothing announced and nothing taken (a transaction that wrote no table with a lookup): nothing to apply.
    if (this.#taken.length === 0 && ![...this.#watches.values()].some((w) => w.pending)) return;
    const { ctx } = this;
    const map = await ctx.map.fresh();
    // Shards joined by the hook itself (entry shards) are not writers: only the ones joined before it are read.
    const writers = [...this.#joined].filter(
      ([shard, p]) => this.#dirty.has(shard) && this.#watches.get(p.server)?.pending,
    );
    const changes: Change[] = [...this.#taken];
    for (const [shard] of writers) {
      const session = await cross.join(placementIn(map, shard));
      changes.push(...(await takeChanges({ schema: session.schema, query: (t, v) => session.query(t, v) })));
    }
    const net = netChanges(changes, map.logicalShards);
    if (net.length === 0) return;
    // Every entry server this commit needs, joined in name order before any entry is written (see above).
    const held = new Set(cross.servers);
    const firstOnServer = new Map<string, number>();
    for (const change of net) {
      const server = placementIn(map, change.shard).server;
      if (!held.has(server) && !firstOnServer.has(server)) firstOnServer.set(server, change.shard);
    }
    for (const server of [...firstOnServer.keys()].sort())
      await cross.join(placementIn(map, firstOnServer.get(server) as number));
    // The entry writes go out with each server's commit step, in the same round trip (cross.ts, `defer`).
    for (const statement of entryStatements(net, (shard) => placementIn(map, shard).schema))
      await cross.defer(placementIn(map, statement.shard), statement);
  }
}

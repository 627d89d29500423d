/*
 * routing/: The router's data path: the cached shard map, shard keys, a lease on a node, shard sessions (one
 * transaction in one shard), retries on a moved or fenced shard, read-your-writes positions, single-row calls,
 * bulk writes and reads merged across shards. Features built on top (lookups, reference tables) plug in through
 * RouterContext.
 *
 * May import: errors, ids, postgres, config, topology, catalog, telemetry, deadlocks, fence, recovery.
 */
import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import type { DeadlockDetector } from '../deadlocks/detector.js';
import type { TransactionState } from '../recovery/state.js';
import type { Operation, RouterEventHook } from '../telemetry/events.js';
import type { ServerNodes } from '../topology/nodes.js';
import type { MapState, ShardMapCache } from './map.js';
import type { ReadPositions } from './positions.js';
import type { Statements } from './statements.js';

/** What the router's parts (sessions, bulk writes, scatter reads, single-row calls) share. */
export interface RouterContext {
  readonly map: ShardMapCache;
  readonly statements: Statements;
  readonly positions: ReadPositions;
  readonly policy: RetryPolicy;
  readonly onEvent: RouterEventHook | undefined;
  /** Cross-server transactions: cluster identity, ready servers, recovery (recovery/state.ts). */
  readonly transactions: TransactionState;
  /**
   * The deadlock detector and the bounds on the waits of transactions across shards (deadlocks/detector.ts);
   * without it, those transactions carry no tag and no bounds.
   */
  readonly deadlocks?: DeadlockDetector;
  /** The nodes of a configured server (created on first use). */
  nodes(server: string): ServerNodes;
  /**
   * A second set of pools, for participants a cross transaction joins while it commits (a lookup's entry
   * shards, joined by its beforeCommit hook after the transaction already holds connections): see
   * lookups/cross.ts for why one pool set for both could deadlock.
   */
  commitNodes?(server: string): ServerNodes;
  /**
   * How a single-row write (router/rows.ts) reaches a table that has a lookup: in a transaction that keeps the
   * lookup (lookups/rows.ts); undefined for a table without one (one statement in autocommit).
   */
  keptWrite?(table: string): KeptWrite | undefined;
  /**
   * What a write session does for the lookups of its shard (lookups/commit.ts; the router passes it in, so that
   * sessions need not import the lookups built on top of them).
   */
  readonly sessionLookups: SessionLookups;
  /** The config's reference tables by name, made by `referenceTables` or `referenceMigrations` (router.sql). */
  readonly referenceTables?: ReadonlySet<string>;
  /** How router.sql cuts a server's shards into statements and how many of them run at once (sql/route.ts). */
  readonly sqlPieces: SqlPieces;
}

/** router.sql's pieces: `RouterOptions.sqlShardsPerStatement`, `sqlConnectionsPerServer` and `sqlPrepare`, with their defaults. */
export interface SqlPieces {
  /** Most shards one statement reads. */
  readonly shardsPerStatement: number;
  /** Most of a server's pooled connections one call uses at once (never more than the pool). */
  readonly connectionsPerServer: number;
  /** When pieces go as named statements (`RouterOptions.sqlPrepare`, sql/prepared.ts). */
  readonly prepare: SqlPrepare;
}

/** When router.sql sends its pieces as named prepared statements (`RouterOptions.sqlPrepare`). */
export type SqlPrepare = 'auto' | 'always' | 'never';

/**
 * A write session watches its connection for the lookups' capture-trigger notice and, when one came, applies the
 * announced changes to the entries before its COMMIT.
 */
export interface SessionLookups {
  watch(client: pg.ClientBase): { readonly pending: boolean; stop(): void };
  beforeCommit(ctx: RouterContext, placement: ShardPlacement, client: pg.ClientBase): Promise<void>;
}

/** A single-row write: the statement for the shard `shardOf` picks, with its values (and an insert's row). */
export type KeptWrite = (
  operation: Operation,
  shardOf: (map: MapState) => number,
  text: (schema: string) => string,
  values: unknown[],
  row?: Record<string, unknown>,
) => Promise<pg.QueryResult>;

export interface RetryPolicy {
  /** How long an operation keeps retrying on a fenced, moving or failed-over shard (ms). */
  writeRetryMs: number;
  /** First wait between retries when no newer map arrives (ms); it doubles up to `maxRetryBackoffMs`. */
  retryBackoffMs: number;
  maxRetryBackoffMs: number;
  onRetry: ((retry: WriteRetry) => void) | undefined;
}

/** A retry of a write on a fenced or moving shard, as `RouterOptions.onRetry` is told of it (retry.ts says when). */
export interface WriteRetry {
  /** The logical shard the write is for. */
  shard: number;
  /** 1 for the first retry. */
  attempt: number;
  /** `fenced`: the write reached a copy that was moved away; `moving`: it met the cutover's locks. */
  reason: 'fenced' | 'moving';
  /** What ended the wait: a newer map (from NOTIFY or another refresh), or the backoff timeout. */
  woke: 'map' | 'timeout';
}

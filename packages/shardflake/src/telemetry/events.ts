/*
 * telemetry/: What a router reports about its work: the event types and the hook (events.ts), an operation's trace
 * (trace.ts), and the bridge to OpenTelemetry, a no-op unless the application installs an SDK (telemetry.ts).
 *
 * May import: errors, postgres, topology.
 */
import type { ShardflakeError } from '../errors/errors.js';
import type { FailoverEvent, NodeRole } from '../topology/nodes.js';

export type { FailoverEvent };

/**
 * What a router reports about its own work, to `RouterOptions.onEvent` and (through ./telemetry.ts) to
 * OpenTelemetry. One event per routed operation when it ends, plus events for what happens around operations:
 * map changes, catalog outages, failovers and retries. Events are plain data, emitted synchronously; a hook that
 * throws is ignored (the router's work never depends on its observers).
 */
export const OPERATIONS = [
  'withShard',
  'insert',
  'insertMany',
  'get',
  'update',
  'delete',
  'feed',
  'query', // a cross-shard read
  'sql', // router.sql: one SELECT across every shard
  'withShards', // an atomic write across shards (transactions/)
  'withReference', // a write of the reference tables on every server (reference/)
] as const;
/** A routed call the router reports when it ends, one of `OPERATIONS`. */
export type Operation = (typeof OPERATIONS)[number];

/**
 * Why the router ran an operation again: the shard was fenced, moving, on a primary that failed over, or its schema
 * was not where the map said; or (withShards with its `retry` option) the transaction was a deadlock's victim or
 * failed a serialization check.
 */
export const RETRY_REASONS = [
  'fenced',
  'moving',
  'failover',
  'unknown-table',
  'deadlock',
  'serialization',
] as const;
/** One of `RETRY_REASONS`. */
export type RetryReason = (typeof RETRY_REASONS)[number];

/**
 * Reported at the end of every routed call: where it ran (shards, servers, nodes and their roles), how long it
 * waited for a connection and took in all, its retries, and its error if it failed.
 */
export interface OperationEvent {
  /** Always `operation`: tells this event apart in a `RouterEvent`. */
  type: 'operation';
  /** The router method that ran, such as `get`, `insert` or `sql`. */
  operation: Operation;
  /** The shard the operation ran in; for a multi-shard operation, the shards it touched. */
  shards: number[];
  /** The configured server name(s) it ran on. */
  servers: string[];
  /** The node(s) it ran on (URLs with the password redacted) and their role when it ran. */
  nodes: {
    /** The node's URL with its password redacted. */
    node: string;
    /** Whether the node was the server's primary or a replica when the operation used it. */
    role: NodeRole;
  }[];
  /** Time spent waiting for connections, summed over attempts. */
  waitMs: number;
  /** From the call to its end, retries included. */
  totalMs: number;
  /** How many times the operation ran again (0 when the first attempt settled it); see `retryReasons`. */
  retries: number;
  /** Why each retry happened, in order. */
  retryReasons: RetryReason[];
  /** Set when the operation failed. */
  error?: ShardflakeError;
}

/** Reported before the router runs an operation again on a shard, with the reason and the attempt number. */
export interface RetryEvent {
  /** Always `retry`. */
  type: 'retry';
  /** The router method being retried. */
  operation: Operation;
  /** The logical shard whose attempt is retried. */
  shard: number;
  /** 1 for the first retry. */
  attempt: number;
  /**
   * Why: the copy was `fenced`, the shard was `moving`, its primary failed over (`failover`), its schema was not
   * where the map said (`unknown-table`), or the transaction was a deadlock's victim (`deadlock`) or failed a
   * serialization check (`serialization`) and withShards' `retry` option runs it again.
   */
  reason: RetryReason;
  /** What ended the wait: a newer map, or the backoff timeout. */
  woke: 'map' | 'timeout';
}

/** Reported when the router takes a newer shard map from the catalog. */
export interface MapEvent {
  /** Always `map`. */
  type: 'map';
  /** The map version the router routes by from now on. */
  version: bigint;
  /** The version the router had before (0n at start). */
  previous: bigint;
  /** How the catalog was read: the whole map (`full`), or only the shards changed since `previous` (`changes`). */
  read: 'full' | 'changes';
  /** How many shard rows the refresh read from the catalog: every shard for `full`, the changed ones otherwise. */
  shardRows: number;
  /**
   * In a cluster adopted from a live database (docs/adopt.md): `source` while the router serves every shard from
   * the source (before the switch), `shards` after it; absent in a cluster that adopted nothing.
   */
  adoption?: 'source' | 'shards';
}

/** Reported when the catalog stops answering the router (it serves from its last map) and when it answers again. */
export interface CatalogEvent {
  /** `catalog-down`: the router keeps serving from its last map; `catalog-up`: it listens and refreshes again. */
  type: 'catalog-down' | 'catalog-up';
  /** The catalog server's name in the config. */
  server: string;
  /** With `catalog-down`: the error that showed the catalog was gone; absent with `catalog-up`. */
  error?: ShardflakeError;
}

/**
 * One step of a cross-server commit (transactions/cross.ts) or of recovery (recovery/recovery.ts): `start`
 * just before the statement is sent, then `done` or `failed`. Emitted synchronously, in protocol order.
 */
export const TRANSACTION_PHASES = [
  'prepare', // PREPARE TRANSACTION on a participant
  'decide', // the last agent's COMMIT, which carries the decision row
  'commit-prepared',
  'rollback-prepared',
  'recover-commit', // recovery committed a prepared transaction that has a commit decision
  'recover-rollback', // recovery rolled back one without (its coordinator gone, or an abort decision)
] as const;
/** A step of a transaction across shards, one of `TRANSACTION_PHASES`. */
export type TransactionPhase = (typeof TRANSACTION_PHASES)[number];

/** Reported as each step of a transaction across servers starts, finishes or fails (prepare, commit, recovery). */
export interface TransactionEvent {
  /** Always `transaction`. */
  type: 'transaction';
  /** The protocol step: `prepare`, `decide`, `commit-prepared`, `rollback-prepared` or a recovery step. */
  phase: TransactionPhase;
  /** `start` just before the statement is sent, then `done` or `failed`. */
  step: 'start' | 'done' | 'failed';
  /** The cross-server transaction's id, shared by every step of it (and the `txid` part of its gids). */
  txid: string;
  /** The configured server the step ran on. */
  server: string;
  /** The prepared part's global transaction id, for the steps that act on one (not `decide`). */
  gid?: string;
  /** For `done` and `failed`: how long the step took. */
  ms?: number;
  /** With `failed`: what the step raised, when it raised something. */
  error?: ShardflakeError;
}

/**
 * The router fenced copies of shards the catalog places elsewhere on a node it connected to (a replica promoted
 * after a move it was not waited for: fence/strays.ts).
 */
export interface StrayEvent {
  type: 'stray-fenced';
  server: string;
  node: string;
  shards: number[];
}

/**
 * Reported by the router that broke a deadlock across servers (deadlocks/detector.ts): the transactions that waited
 * for each other in a cycle spanning servers, and the one of them this router cancelled, the youngest. Only the
 * victim's own router reports it, so a deadlock is reported once however many routers took part.
 */
export interface DeadlockEvent {
  /** Always `deadlock`. */
  type: 'deadlock';
  /** The txid of the transaction cancelled: its withShards rejects with DEADLOCK, and nothing of it commits. */
  victim: string;
  /**
   * The txids of the transactions across shards in the deadlock, the victim among them, oldest first. Sessions of
   * other clients that waited among them (a plain withShard, psql) are counted in `sessions`, not named.
   */
  transactions: string[];
  /** How many sessions took part in all: the transactions, plus any other session waiting among them. */
  sessions: number;
  /** The configured servers on which the deadlock's waits were seen. */
  servers: string[];
  /** How long the victim's statement had waited when it was cancelled (ms). */
  waitedMs: number;
}

/** Every event a router reports to `onEvent`; `type` tells them apart. */
export type RouterEvent =
  | OperationEvent
  | RetryEvent
  | MapEvent
  | CatalogEvent
  | FailoverEvent
  | TransactionEvent
  | StrayEvent
  | DeadlockEvent;
/** The `onEvent` hook of `createRouter`: called for every event; an error it throws is ignored. */
export type RouterEventHook = (event: RouterEvent) => void;

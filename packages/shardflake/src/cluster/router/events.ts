import type { ShardflakeError } from '../../errors.js';
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
export type Operation = (typeof OPERATIONS)[number];

export const RETRY_REASONS = ['fenced', 'moving', 'failover', 'unknown-table'] as const;
export type RetryReason = (typeof RETRY_REASONS)[number];

export interface OperationEvent {
  type: 'operation';
  operation: Operation;
  /** The shard the operation ran in; for a multi-shard operation, the shards it touched. */
  shards: number[];
  /** The configured server name(s) it ran on. */
  servers: string[];
  /** The node(s) it ran on (URLs with the password redacted) and their role when it ran. */
  nodes: { node: string; role: NodeRole }[];
  /** Time spent waiting for connections, summed over attempts. */
  waitMs: number;
  /** From the call to its end, retries included. */
  totalMs: number;
  retries: number;
  /** Why each retry happened, in order. */
  retryReasons: RetryReason[];
  /** Set when the operation failed. */
  error?: ShardflakeError;
}

export interface RetryEvent {
  type: 'retry';
  operation: Operation;
  shard: number;
  /** 1 for the first retry. */
  attempt: number;
  reason: RetryReason;
  /** What ended the wait: a newer map, or the backoff timeout. */
  woke: 'map' | 'timeout';
}

export interface MapEvent {
  type: 'map';
  version: bigint;
  /** The version the router had before (0n at start). */
  previous: bigint;
}

export interface CatalogEvent {
  /** `catalog-down`: the router keeps serving from its last map; `catalog-up`: it listens and refreshes again. */
  type: 'catalog-down' | 'catalog-up';
  /** The catalog server's name in the config. */
  server: string;
  error?: ShardflakeError;
}

/**
 * One step of a cross-server commit (transactions/cross.ts) or of recovery (transactions/recovery.ts): `start`
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
export type TransactionPhase = (typeof TRANSACTION_PHASES)[number];

export interface TransactionEvent {
  type: 'transaction';
  phase: TransactionPhase;
  step: 'start' | 'done' | 'failed';
  txid: string;
  /** The configured server the step ran on. */
  server: string;
  gid?: string;
  /** For `done` and `failed`: how long the step took. */
  ms?: number;
  error?: ShardflakeError;
}

export type RouterEvent =
  | OperationEvent
  | RetryEvent
  | MapEvent
  | CatalogEvent
  | FailoverEvent
  | TransactionEvent;
export type RouterEventHook = (event: RouterEvent) => void;

/**
 * shardflake's public API. Everything a user imports comes from here, with types.
 *
 * @module shardflake
 */

// cluster
export type { ClusterInfo, ShardMap, ShardPlacement, ShardState } from './cluster/catalog/shards.js';
export { MAP_CHANNEL, readShardMap, SHARD_STATES } from './cluster/catalog/shards.js';
export type { ClusterConfig, Migration, TableTemplate } from './cluster/config.js';
export {
  loadConfig,
  MAX_LOGICAL_SHARDS,
  parseConfig,
  shardSchema,
  validateConfig,
} from './cluster/config.js';
export type { InitOptions, InitResult } from './cluster/init.js';
export { initCluster, planPlacement } from './cluster/init.js';
export type { Lease, LeaseOptions } from './cluster/leases.js';
export { acquireLease, leasedGenerator } from './cluster/leases.js';
export type { LookupDefinition } from './cluster/lookups/config.js';
export type { LookupHit, LookupHitWithRow, LookupOptions, LookupValue } from './cluster/lookups/read.js';
export type { MigrateOptions, MigrateResult, ShardFailure } from './cluster/migrate.js';
export { migrateCluster } from './cluster/migrate.js';
export type { IndexBuildEvent } from './cluster/migrate-concurrently.js';
export type { ReferenceConfig } from './cluster/reference/config.js';
export type { ReferenceProblem } from './cluster/reference/verify.js';
export { checkReferenceTables } from './cluster/reference/verify.js';
export type { ReferenceSession } from './cluster/reference/write.js';
export type { InsertManyOptions } from './cluster/router/bulk.js';
export type { WriteRetry } from './cluster/router/context.js';
export type {
  CatalogEvent,
  FailoverEvent,
  MapEvent,
  Operation,
  OperationEvent,
  RetryEvent,
  RetryReason,
  RouterEvent,
  RouterEventHook,
  TransactionEvent,
  TransactionPhase,
} from './cluster/router/events.js';
export { OPERATIONS, RETRY_REASONS, TRANSACTION_PHASES } from './cluster/router/events.js';
export type { Router, RouterOptions } from './cluster/router/router.js';
export { createRouter, FENCED_SQLSTATE } from './cluster/router/router.js';
export type { InsertOptions, Row } from './cluster/router/rows.js';
export type {
  FeedCommon,
  FeedKeys,
  FeedOptions,
  FeedPage,
  MergedQuery,
  ShardQuery,
} from './cluster/router/scatter.js';
export type { SessionOptions, ShardSession, ShardTarget } from './cluster/router/session.js';
export type { SessionPool, SessionPoolClient } from './cluster/router/session-pool.js';
export { sessionPool } from './cluster/router/session-pool.js';
export type { TelemetryOptions } from './cluster/router/telemetry.js';
export { telemetryHook } from './cluster/router/telemetry.js';
export type { ShardKey } from './cluster/shard-key.js';
export { hashKey, shardForKey } from './cluster/shard-key.js';
export type { SqlColumn, SqlOptions, SqlResult, SqlStreamOptions } from './cluster/sql/index.js';
export type { ClusterStatus, NodeStatus, ShardStats, ShardStatus } from './cluster/status.js';
export { clusterStatus } from './cluster/status.js';
export type {
  AcquireOptions,
  Lsn,
  NodeLease,
  NodeRole,
  ServerNodes,
  ServerNodesOptions,
} from './cluster/topology/nodes.js';
export { createServerNodes } from './cluster/topology/server-nodes.js';
export type { InDoubtGid, RecoveryReport, SettledGid } from './cluster/transactions/recovery.js';
export type { TransactionOptions } from './cluster/transactions/state.js';
export type { ErrorCode, ErrorDetails } from './errors.js';
export { ERROR_CODES, isShardflakeError, redactSecrets, ShardflakeError, sqlStateOf } from './errors.js';
export type { DecodedId, IdParts, LayoutInput } from './ids/codec.js';
export { decodeId, encodeId, idRange } from './ids/codec.js';
export type { Generator, GeneratorOptions } from './ids/generator.js';
export { capPerSecond, createGenerator, SequenceState } from './ids/generator.js';
export type { NotAnId, ShardflakeId } from './ids/id.js';
export { asId, asIds } from './ids/id.js';
export type { IdEncoding } from './ids/id-text.js';
export { formatId, ID_ENCODINGS, parseId } from './ids/id-text.js';
export type { IdFormat, Inspection, InspectOptions } from './ids/inspect.js';
export { ID_FORMATS, inspect, inspectionToJson } from './ids/inspect.js';
export type { FieldKind, FieldSpec, Layout, LayoutField, LayoutSpec, PresetName } from './ids/layout.js';
// ids
export { defineLayout, FIELD_KINDS, layouts, PRESET_NAMES, resolveLayout, withEpoch } from './ids/layout.js';
export type {
  DecodedLsid,
  FormatOptions as LsidFormatOptions,
  LsidGenerator,
  LsidGeneratorOptions,
  LsidInput,
  LsidParts,
} from './ids/lsid.js';
export { lsid } from './ids/lsid.js';
export { LsidState } from './ids/lsid-generator.js';
export type { MacChoice } from './ids/worker-id.js';
export { findMac, workerIdFromMac } from './ids/worker-id.js';
// shard moves
export type { CleanupOptions, CleanupResult } from './move/cleanup.js';
export { cleanupCluster } from './move/cleanup.js';
export { isInterrupted as isMoveInterrupted } from './move/connections.js';
export type { Throttle } from './move/copy-stream.js';
export { parseThrottle } from './move/copy-stream.js';
export { moveSets, moveShard, moveShards } from './move/move.js';
export type {
  MoveOptions,
  MoveProgress,
  MoveResult,
  MoveStep,
  SetMoveOptions,
  SetProgress,
  VerifyMode,
} from './move/options.js';
export { VERIFY_MODES } from './move/options.js';
export type {
  MoveEstimate,
  PlannedMove,
  PlanOptions,
  RebalanceOptions,
  RebalancePlan,
  RebalanceResult,
} from './move/rebalance.js';
export {
  BALANCE_BY,
  planRebalance,
  planRebalanceByRows,
  planRebalanceByWeight,
  rebalanceCluster,
} from './move/rebalance.js';
export type { ConnectOptions, Queryable } from './postgres/connect.js';
export { connect, createPool, describeUrl } from './postgres/connect.js';
export type { GeneratorLanguage, GeneratorSqlOptions, GeneratorSqlPlan } from './postgres/generator-sql.js';
export {
  GENERATOR_LANGUAGES,
  GENERATOR_VERSION,
  generatorPlan,
  generatorSql,
} from './postgres/generator-sql.js';
// postgres
export { quoteIdent, validateIdentifier } from './postgres/identifier.js';
export type { InstalledGenerator } from './postgres/install.js';
export {
  ensureGeneratorAbove,
  installGenerator,
  lastIssuedId,
  readInstalledGenerator,
} from './postgres/install.js';
export { VERSION } from './version.js';

/**
 * shardflake's public API. Everything a user imports comes from here, with types.
 *
 * @module shardflake
 */

export type { InitOptions, InitResult } from './admin/init.js';
export { initCluster, planPlacement } from './admin/init.js';
export type { MigrateOptions, MigrateResult, ShardFailure } from './admin/migrate.js';
export { migrateCluster } from './admin/migrate.js';
export type { IndexBuildEvent } from './admin/migrate-concurrently.js';
export type { ClusterStatus, NodeStatus, ShardStats, ShardStatus } from './admin/status.js';
export { clusterStatus } from './admin/status.js';
// backups
export type { RestorePoint, RestorePointOptions } from './backups/restore-point.js';
export { createRestorePoint, RESTORE_POINT_DEFAULTS } from './backups/restore-point.js';
export type { RestoredShard, RestoreShardOptions } from './backups/restore-shard.js';
export { restoreShard } from './backups/restore-shard.js';
export type { DeadlockRecord, DeadlocksStatus } from './catalog/deadlocks.js';
export type { RestorePointRecord, RestorePointState } from './catalog/restore-points.js';
export { RESTORE_POINT_STATES } from './catalog/restore-points.js';
// cluster
export type { ClusterInfo, ShardMap, ShardPlacement, ShardState } from './catalog/shards.js';
export { MAP_CHANNEL, readShardMap, SHARD_STATES } from './catalog/shards.js';
export type { ClusterConfig, Migration, TableTemplate } from './config/config.js';
export {
  loadConfig,
  MAX_LOGICAL_SHARDS,
  parseConfig,
  shardSchema,
  validateConfig,
} from './config/config.js';
export type { LookupDefinition } from './config/lookups.js';
export type { ReferenceConfig } from './config/reference.js';
export type { DeadlockOptions } from './deadlocks/detector.js';
export type { ErrorCode, ErrorDetails } from './errors/errors.js';
export {
  AuthFailedError,
  ERROR_CODES,
  isShardflakeError,
  redactSecrets,
  ShardflakeError,
  sqlStateOf,
} from './errors/errors.js';
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
export type { Lease, LeaseOptions } from './leases/leases.js';
export { acquireLease, leasedGenerator } from './leases/leases.js';
export type { LookupHit, LookupHitWithRow, LookupOptions, LookupValue } from './lookups/read.js';
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
export type { InDoubtGid, RecoveryReport, SettledGid } from './recovery/recovery.js';
export type { TransactionOptions } from './recovery/state.js';
export type { ReferenceProblem } from './reference/verify.js';
export { checkReferenceTables } from './reference/verify.js';
export type { ReferenceSession } from './reference/write.js';
export type { Router, RouterOptions } from './router/router.js';
export { createRouter, FENCED_SQLSTATE } from './router/router.js';
export type { InsertManyOptions } from './routing/bulk.js';
export type { SqlPrepare, WriteRetry } from './routing/context.js';
export type { InsertOptions, Row } from './routing/rows.js';
export type {
  FeedCommon,
  FeedKeys,
  FeedOptions,
  FeedPage,
  MergedQuery,
  ShardQuery,
} from './routing/scatter.js';
export type { SessionOptions, ShardSession, ShardTarget } from './routing/session.js';
export type { SessionPool, SessionPoolClient } from './routing/session-pool.js';
export { sessionPool } from './routing/session-pool.js';
export type { ShardKey } from './routing/shard-key.js';
export { hashKey, shardForKey } from './routing/shard-key.js';
export type { SqlColumn, SqlOptions, SqlResult, SqlStreamOptions } from './sql/index.js';
export type {
  CatalogEvent,
  DeadlockEvent,
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
} from './telemetry/events.js';
export { OPERATIONS, RETRY_REASONS, TRANSACTION_PHASES } from './telemetry/events.js';
export type { TelemetryOptions } from './telemetry/telemetry.js';
export { telemetryHook } from './telemetry/telemetry.js';
export { VERSION } from './telemetry/version.js';
export type {
  AcquireOptions,
  Lsn,
  NodeLease,
  NodeRole,
  ServerNodes,
  ServerNodesOptions,
} from './topology/nodes.js';
export { createServerNodes } from './topology/server-nodes.js';
export type { WithShardsOptions } from './transactions/with-shards.js';

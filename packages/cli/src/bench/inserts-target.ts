import type { IdType } from './inserts-types.js';

/**
 * What the insert benchmark needs from a database engine. One implementation per engine (Postgres, InnoDB);
 * the benchmark loop in inserts.ts drives either without knowing which.
 */
export interface InsertTarget {
  readonly engine: 'postgres' | 'mariadb';
  /** Server and settings, password-free, for the output. */
  readonly description: string;
  /** The cache the index competes for, in bytes (shared_buffers / innodb_buffer_pool_size). */
  readonly cacheBytes: number;
  /** Creates (or re-creates) the type's table. */
  prepare(type: IdType): Promise<void>;
  /** Bulk-loads `rows` keys in generation order (not timed). */
  preload(type: IdType, rows: number): Promise<void>;
  /** Flushes dirty pages so every type starts its timed phase from the same state. */
  checkpoint(): Promise<void>;
  /** Makes the key an `app` type binds (undefined when the database makes it); called outside the timing. */
  key(type: IdType): unknown;
  /** One single-row autocommit INSERT of `key` (from `key()`): the timed operation. */
  insert(type: IdType, n: number, key: unknown): Promise<void>;
  /** Engine-wide counters; differences around a batch are charged to the batch's type. */
  counters(): Promise<Counters>;
  /** Sizes of the type's table and primary-key index, read after the run. */
  sizes(type: IdType): Promise<TableSizes>;
  /** Drops the benchmark's tables and restores any setting it changed. */
  close(): Promise<void>;
}

/** Cumulative counters. Any may be absent where the engine has no such figure. */
export interface Counters {
  /** WAL (Postgres) or redo log (InnoDB) bytes written. */
  logBytes?: number;
  /** Full-page images written to the WAL (Postgres 14+). */
  fullPageImages?: number;
  /** Index blocks read from outside the cache (Postgres: from the OS; InnoDB: buffer pool misses). */
  blocksRead?: number;
  /** Index blocks found in the cache. */
  blocksHit?: number;
  /** B-tree page splits (InnoDB's index_page_splits metric). */
  pageSplits?: number;
}

export interface TableSizes {
  indexBytes: number;
  tableBytes: number;
  /** Average fill of the index's leaf pages in percent (pgstattuple's pgstatindex), when available. */
  leafDensity?: number;
}

export const COUNTER_NAMES = ['logBytes', 'fullPageImages', 'blocksRead', 'blocksHit', 'pageSplits'] as const;

/** Table name for a type: `bench_` + the type name with dashes as underscores (only [a-z0-9_]). */
export const tableFor = (type: IdType): string => `bench_${type.name.replaceAll('-', '_')}`;

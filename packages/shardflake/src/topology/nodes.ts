/*
 * topology/: The physical servers: the nodes of each server (a primary and its streaming replicas), their roles
 * found at run time, failover, replica lag and LSNs, and the plain connections admin commands open to a server
 * (connections.ts).
 *
 * May import: errors, postgres, config.
 */
import type pg from 'pg';
import type { ShardflakeError } from '../errors/errors.js';

/**
 * The nodes of one configured server, as the router sees them: where a write goes (the primary), where a read
 * may go (a replica that has replayed far enough, else the primary), and what an error on a node means.
 *
 * This file is the seam between the router (sessions, bulk writes, scatter reads: they only ask for a lease) and
 * the topology (role discovery, failover, replica lag: it only hands out leases): the contract and the events it
 * reports. Two implementations: single-server.ts (a server of one node) and replicated-server.ts (a primary and
 * its streaming replicas, failover); server-nodes.ts picks one.
 */
export type NodeRole = 'primary' | 'replica';

/** A position in a server's WAL as PostgreSQL prints it (`16/B374D848`); used for read-your-writes. */
export type Lsn = string;

/** What a connection is wanted for: a write (the primary) or a read that must see a write position. */
export interface AcquireOptions {
  /** 'write' → the primary. 'read' → a replica that has replayed `after` (and is not lagging), else the primary. */
  intent: 'write' | 'read';
  /** The last write position the reader must see on this server. */
  after?: Lsn;
  /** The shard the lease is for, when it is one: an idle connection warm on it is preferred (warm-shards.ts). */
  shard?: number;
  /**
   * An idle connection for which this is true is taken before any other (router.sql takes one that holds its
   * piece's prepared statement, sql/prepared.ts); then `shard` decides.
   */
  prefers?: (client: pg.ClientBase) => boolean;
}

/** What decides which idle connection a lease takes (warm-shards.ts). */
export type IdlePreference = Pick<AcquireOptions, 'shard' | 'prefers'>;

/** A connection to one node of a server, borrowed from its pool, with the role the node had when it was found. */
export interface NodeLease {
  /** The borrowed pg connection; use it only until `release`. */
  readonly client: pg.PoolClient;
  /** The node's URL, password redacted. */
  readonly node: string;
  /** Whether the node was the primary or a replica when the lease was made. */
  readonly role: NodeRole;
  /** Milliseconds spent waiting for the connection (pool queue and connect). */
  readonly waitMs: number;
  /**
   * Records the shards the lease's statements address, so that the connection stays warm on a slice of the
   * server's shards and is replaced once it has touched more than `shardsPerConnection` (warm-shards.ts).
   */
  touch(shards: number | Iterable<number>): void;
  /** Gives the connection back; pass the error when the connection may be broken, so the pool discards it. */
  release(error?: unknown): void;
}

/** Options of `createServerNodes`: the pools of a server's nodes, and how replicas and failover are handled. */
export interface ServerNodesOptions {
  /** Connections per node pool (default 10). */
  poolSize?: number;
  /** Close a pooled connection after it served this many checkouts (0 = never). */
  maxUses?: number;
  /** Close a pooled connection this many seconds after it opened (0 = never). */
  maxLifetimeSeconds?: number;
  /**
   * Close a pooled connection, when it is released, once it has touched more than this many distinct shards
   * (0 = never; default 256). See warm-shards.ts.
   */
  shardsPerConnection?: number;
  /** How long a new connection to a node may take before SERVER_UNREACHABLE, in ms (default 5000). */
  connectTimeoutMs?: number;
  /** The `application_name` the pools' connections show in pg_stat_activity (default `shardflake router`). */
  applicationName?: string;
  // The rest applies to servers with replicas (src/topology/replicated-server.ts).
  /** A replica further behind than this is not used for reads until it catches up (default 10 000 ms). */
  maxReplicaLagMs?: number;
  /** How long a replica's replay position and lag are trusted before being read again (default 1000 ms). */
  replicaCheckMs?: number;
  /** How long an acquire for a write waits for a primary to appear during a failover (default 15 000 ms). */
  failoverWaitMs?: number;
  /** How often the roles are asked again while no primary is found (default 250 ms). */
  rediscoverMs?: number;
  /** How long a node that failed is skipped for reads before it is tried again (default 1000 ms). */
  suspectMs?: number;
  /** Told when a node is marked suspect and when the roles have been found again. */
  onEvent?: (event: FailoverEvent) => void;
}

/**
 * The nodes of one configured server (a primary and its streaming replicas) behind one object: it finds their roles
 * at run time, lends connections for writes and reads, and follows a promotion. The router uses one per server.
 */
export interface ServerNodes {
  /** The server's name in the config. */
  readonly name: string;
  /** True when the server has replicas: only then does the router record write positions. */
  readonly hasReplicas: boolean;
  /**
   * Lends a connection: the primary for a write, a replica that has replayed `after` for a read (else the primary);
   * waits for a primary during a failover, up to the configured time, then NO_PRIMARY.
   */
  acquire(options: AcquireOptions): Promise<NodeLease>;
  /**
   * Called after a write transaction committed, with its lease still held: the position a later read must see.
   * Undefined when the server has no replicas (no round trip is spent then).
   */
  positionAfterWrite(lease: NodeLease): Promise<Lsn | undefined>;
  /**
   * Reports that an operation failed on `node`. Returns true when the error says the node is gone or no longer the
   * primary (connection refused or reset, admin shutdown 57P01, read-only transaction 25006, …): the node is then
   * suspect and the next acquire finds the roles again. The caller decides whether a retry is safe.
   */
  noteError(node: string, error: unknown): boolean;
  /** Closes every node's pool. */
  end(): Promise<void>;
}

/** Reported when a node is marked suspect after an error and when the roles of a server's nodes are found again. */
export interface FailoverEvent {
  /** A node was marked suspect (`node-suspect`) and the roles found again (`roles-found`). */
  type: 'node-suspect' | 'roles-found';
  /** The configured server whose node it is. */
  server: string;
  /** The node concerned (URL, password redacted): the suspect one, or for `roles-found` the primary. */
  node: string;
  /** For `roles-found`: the primary now. */
  primary?: string;
  /** For `node-suspect`: the error that made the node suspect. */
  error?: ShardflakeError;
}

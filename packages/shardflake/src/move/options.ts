import type { MovePhase } from '../catalog/moves.js';
import type { Throttle } from './copy-stream.js';
import type { ReplicationLogin } from './replication.js';

/** What a caller can ask of a move, what it reports while it runs, and what it returns; defaults in one place. */
export interface MoveOptions {
  /** Called on each phase and while copying. */
  onProgress?: (progress: MoveProgress) => void;
  /** Stops the move at the next check (like a crash: nothing is rolled back; a rerun resumes). */
  signal?: AbortSignal;
  /**
   * Test hook: after recording this phase, the move drops its connections without a word and stops, as a killed
   * process would. `cutover-locked` stops while the source is locked, before the fence commits.
   */
  stopAfter?: MoveStep;
  /** Awaited at each step (after its phase is recorded): lets a test hold a real process there and kill it. */
  afterStep?: (step: MoveStep) => Promise<void> | void;
  /** Longest wait for the source's table locks at cutover (default 2000 ms); it is retried `cutoverAttempts` times. */
  lockTimeoutMs?: number;
  /**
   * How many times cutover tries to lock the source's tables before the move fails with MOVE_FAILED
   * (default 3).
   */
  cutoverAttempts?: number;
  /** Longest wait, with writes paused, for the target to catch up and match (default 10 000 ms). */
  cutoverTimeoutMs?: number;
  /** Longest wait for the initial copy and catch-up (default 30 minutes). */
  syncTimeoutMs?: number;
  /**
   * Longest wait, between the fence's commit and the switch (writes paused), for every replica the config lists for
   * the source to replay the fence (default 5000 ms); past it the move rolls back instead of switching.
   */
  replicaFenceTimeoutMs?: number;
  /** Replicas of the source declared out (host:port as messages print them, or their URL): not waited for. */
  skipReplicas?: readonly string[];
  /**
   * The longest a frozen or vanished mover can keep a shard's writes paused (default 10 000 ms): its sessions end
   * a transaction left idle that long, wait no longer for a lock, and run no statement in the pause longer.
   */
  pauseBoundMs?: number;
  /** Names this process in the move record (default host:pid). */
  owner?: string;
  /**
   * Where the row-by-row comparison of both copies happens (default `in-pause`):
   * - `in-pause`: counts and checksums of every table while writes are paused, right before the switch. Safest;
   *   the pause grows with the shard's size (about 1 ms per 1,000 rows on a small machine).
   * - `snapshots`: checksums on consistent snapshots pinned during a short earlier pause (VDiff-style, see
   *   snapshots.ts), then a barrier in the cutover pause. For big shards.
   */
  verify?: VerifyMode;
  /** How the subscription logs in to the source: its role and a passfile on the target (replication.ts). */
  replication?: ReplicationLogin;
}

/**
 * How a move compares the two copies of a shard: `in-pause` counts and checksums every table inside the write
 * pause; `snapshots` compares checksums on pinned snapshots before it and only counts rows in it.
 */
export const VERIFY_MODES = ['in-pause', 'snapshots'] as const;
/** One of `VERIFY_MODES`. */
export type VerifyMode = (typeof VERIFY_MODES)[number];

/** Points where a move can be stopped: after each recorded phase, and inside the cutover with the source locked. */
export type MoveStep = MovePhase | 'cutover-locked';

/** A move's progress, reported to `onProgress`: its phase and, while copying, the rows copied of the total. */
export interface MoveProgress {
  /** The logical shard the report is about (while a set copies, the set's first shard). */
  shard: number;
  /** The id of the shard's move record in the catalog; a resumed run reports the same id. */
  moveId: bigint;
  /** The phase just recorded, or `copying` while the initial copy runs. */
  phase: MovePhase | 'copying';
  /**
   * While `copying`, rows copied so far (of the whole set when shards move together); otherwise the shard's
   * rows.
   */
  copiedRows: bigint;
  /** While `copying`, rows to copy (the whole set's); otherwise the same as `copiedRows`. */
  totalRows: bigint;
}

/**
 * What a finished move did: where the shard went, the rows it verified, the copy rate, the write pause and the new
 * map version.
 */
export interface MoveResult {
  /** The id of the shard's move record in the catalog. */
  moveId: bigint;
  /** The logical shard that moved. */
  shard: number;
  /** The shard's schema, the same name on the old server and the new. */
  schema: string;
  /** The server the shard moved away from; its copy there stays fenced until `cluster cleanup` drops it. */
  from: string;
  /** The server the shard lives on now. */
  to: string;
  /** The phase a previous, interrupted run had reached (null for a fresh move). */
  resumedFrom: MovePhase | null;
  /** Rows in the shard when the copies were compared. */
  rows: bigint;
  /** How many tables of the shard were copied and compared. */
  tables: number;
  /** Time of the initial copy, subscription start to every table ready (null when a previous run did it). */
  copyMs: number | null;
  /** Time to build the deferred indexes and catch up after the copy. */
  indexAndCatchUpMs: number | null;
  /** Rows per second of the initial copy (of the whole set); null when a previous run did the copy. */
  rowsPerSecond: number | null;
  /** Writes were paused (source locked) until the catalog switched, in ms. */
  pauseMs: number | null;
  /** Where the pause went, in ms: waiting for the locks, target catch-up, verification, generator + fence, catalog. */
  pauseSteps: Record<string, number>;
  /** How the two copies were compared: the `verify` option, default `in-pause`. */
  verify: VerifyMode;
  /** With `verify: 'snapshots'`, the short pause that pinned both snapshots in ms; null otherwise. */
  snapshotPauseMs: number | null;
  /** With `verify: 'snapshots'`, the checksum comparison on the pinned snapshots in ms; null otherwise. */
  snapshotCompareMs: number | null;
  /** The catalog's map version after the switch that placed the shard on `to`. */
  mapVersion: bigint;
  /** The set this shard moved with (one replication stream for all), or null for a move of its own. */
  batchId?: bigint | null;
  /** For a set: where the set's time went in this run (ms per step: prepare, copy, catchUp, cutover, finish). */
  setSteps?: Record<string, number>;
}

export const DEFAULTS = {
  verify: 'in-pause' as VerifyMode,
  lockTimeoutMs: 2000,
  cutoverAttempts: 3,
  cutoverTimeoutMs: 10_000,
  syncTimeoutMs: 30 * 60_000,
  replicaFenceTimeoutMs: 5000,
  pauseBoundMs: 10_000,
  pollMs: 20,
};

export type Options = MoveOptions & typeof DEFAULTS;

/** A set of shards moving together from one server to another (one replication stream), see set.ts. */
export interface SetMoveOptions extends MoveOptions {
  /** Parallel table copies of the initial copy (default 4: small tables are bound by round trips, not CPU). */
  copyWorkers?: number;
  /** Sets running at once on any one server, as source or target (default 1): each is a replication stream. */
  streamsPerServer?: number;
  /** Limit on the initial copy's speed, over all its tables (per set). */
  throttle?: Throttle;
  /** Shards cut over together in one write pause, at most this many (default 8) … */
  cutoverGroupShards?: number;
  /** … and together holding at most this many rows (default 20,000; a bigger shard goes alone). */
  cutoverGroupRows?: number;
  /** Called while the set copies (rows) and after each cutover group (shards). */
  onSetProgress?: (progress: SetProgress) => void;
}

/** A set's progress, reported to `onSetProgress`: copying or switching, and how many shards are done. */
export interface SetProgress {
  /** The server the set's shards move away from. */
  from: string;
  /** The server the set's shards move to. */
  to: string;
  /** `copying` during the set's initial copy, `switching` after each cutover group. */
  phase: 'copying' | 'switching';
  /** Rows copied so far while `copying`; shards switched so far while `switching`. */
  done: number;
  /** Rows to copy while `copying`; shards in the set while `switching`. */
  total: number;
}

export const SET_DEFAULTS = {
  copyWorkers: 4,
  streamsPerServer: 1,
  cutoverGroupShards: 8,
  cutoverGroupRows: 20_000,
};

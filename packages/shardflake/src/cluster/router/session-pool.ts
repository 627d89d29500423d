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
  connect(): Promise<SessionPoolClient>;
  end(): Promise<void>;
}

export interface SessionPoolClient {
  query: pg.PoolClient['query'];
  release(): void;
}

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

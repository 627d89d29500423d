import type pg from 'pg';
import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { type Queryable, wrapPgError } from '../postgres/connect.js';
import { connectServer } from '../topology/connections.js';

/**
 * The move's connections to the servers (each to a server's primary, failures naming the server), the way a test
 * hook ends them like a crash, and the interruption that follows.
 */

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The interruption of the test hook or an aborted signal: no rollback, the rerun resumes. */
export class MoveInterrupted extends ShardflakeError {
  constructor(message: string) {
    super('MOVE_FAILED', message, { detail: 'interrupted' });
  }
}

/**
 * True when a move stopped because it was interrupted (its signal aborted, or a test's `stopAfter`), not because it
 * failed: nothing was rolled back, and a rerun resumes it.
 */
export function isInterrupted(error: unknown): boolean {
  return error instanceof MoveInterrupted;
}

/**
 * The bound on what a frozen or vanished mover can hold (`pauseBoundMs`, default 10 s): a mover's session that
 * sits in an open transaction longer than that is ended by the server (idle_in_transaction_session_timeout), which
 * releases the cutover's table locks, so writes resume on the source (still the one writable copy: the fence had
 * not committed); no statement of the mover waits longer than that for a lock (lock_timeout), so writers never
 * queue behind a mover's DDL for longer; and inside the write pause no statement runs longer (statement_timeout,
 * set there). A rerun resumes the move.
 */
export function boundedSessionSql(pauseBoundMs: number): string {
  const ms = Math.max(1, Math.round(pauseBoundMs));
  return `SET idle_in_transaction_session_timeout = ${ms}; SET lock_timeout = ${ms}`;
}

/**
 * One connection of the move to a server's primary (through the cluster's connections, which find the primary);
 * failures name the server.
 */
export async function openServer(
  config: ClusterConfig,
  server: string,
  pauseBoundMs?: number,
): Promise<pg.Client> {
  if (!(server in config.servers)) {
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `server ${JSON.stringify(server)} is not in the config (servers: ${Object.keys(config.servers).join(', ')})`,
    );
  }
  try {
    const client = await connectServer(config, server, {
      applicationName: 'shardflake move',
      connectTimeoutMs: 5000,
    });
    if (pauseBoundMs !== undefined) await client.query(boundedSessionSql(pauseBoundMs));
    return client;
  } catch (error) {
    const e = wrapPgError(error);
    // Messages of the topology (a server with replicas) already name the server.
    const message = e.message.startsWith(`server ${server}:`) ? e.message : `server ${server}: ${e.message}`;
    throw new ShardflakeError(e.code, message, { cause: error });
  }
}

/** Ends a client's connection at once, as a killed process would (the server rolls back its transaction). */
export function kill(client: pg.Client | undefined): void {
  const stream = (client as unknown as { connection?: { stream?: { destroy(): void } } } | undefined)
    ?.connection?.stream;
  stream?.destroy();
}

export async function inTransaction<T>(client: Queryable, work: () => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    const result = await work();
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

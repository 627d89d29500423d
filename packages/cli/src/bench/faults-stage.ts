import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  type EmbeddedServer,
  readPostmaster,
  startEmbeddedServer,
  startEmbeddedServers,
} from '@shardflake/embedded';
import { type EmbeddedReplica, startEmbeddedReplica } from '@shardflake/embedded/replica';
import type pg from 'pg';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { type ClusterConfig, shardSchema, validateConfig } from 'shardflake/internal/config/config.js';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { qualified, quoteLiteral } from 'shardflake/internal/postgres/identifier.js';
import { connectServer } from 'shardflake/internal/topology/connections.js';

/**
 * The servers of one fault scenario (bench faults): embedded servers named a, b, c…, the catalog on b (server a
 * is the one that fails over by default, so the catalog must survive it), and optionally a streaming replica of a
 * (or of the server `replicaOf` names — below, "a" is that server), listed in the config as a's second node or
 * left out of it (a node the config does not list). Every scenario gets fresh servers: a failover leaves a killed
 * primary behind.
 */
export interface StageOptions {
  servers: number;
  /** A streaming replica of a (or of `replicaOf`): listed in the config (`listed`), or not (`unlisted`). */
  replica?: 'listed' | 'unlisted';
  /** The server that has the replica and fails over (default a; the catalog is on b either way). */
  replicaOf?: string;
  /** More of the cluster's config: tables, reference tables, lookups (default: the table `items` only). */
  config?: Record<string, unknown>;
  /** Servers the cluster is made on (default all); the rest are in `config` for a rebalance onto them. */
  initialServers?: number;
  logicalShards?: number;
}

export interface Stage {
  servers: EmbeddedServer[];
  replica: EmbeddedReplica | undefined;
  /** The config naming every server (and a's replica when listed). */
  config: ClusterConfig;
  /** The config the cluster was made with (the first `initialServers` servers). */
  initialConfig: ClusterConfig;
  /** `config` as a file, for the CLI. */
  configFile: string;
  /** The nodes the probes check: every node of the current config, by name. */
  nodes: Record<string, string>;
  /**
   * Makes a's replica a synchronous standby that acknowledges on receipt (`synchronous_commit = remote_write`):
   * every commit a acknowledges is in the replica's WAL, so a failover loses no acknowledged row to asynchrony
   * alone, and what a scenario counts as lost is what the move and the failover handling lose. The replica may
   * still lag in replay (`pauseReplay`), which is the lag that matters to a fence.
   */
  syncReplica(): Promise<void>;
  /** Stops the replica's replay (pg_wal_replay_pause): it keeps receiving WAL and falls behind in applying it. */
  pauseReplay(): Promise<void>;
  /**
   * Cuts the replica off (its WAL receiver stopped: primary_conninfo emptied, the walsender gone) and waits until
   * a has no walsender for it. An asynchronous replica: from here on it misses what a commits.
   */
  cutOffReplica(): Promise<void>;
  /** kill -9 of server a's postmaster (a crash, not a shutdown). */
  killPrimary(): Promise<void>;
  /** The failing server's postmaster pid, for a kill at an exact step (faults-cross.ts `killTree`). */
  primaryPid(): Promise<number>;
  /** Stops server a (a fast shutdown) and starts it again on its data and port. */
  restartA(): Promise<void>;
  /**
   * Promotes a's replica and returns a config naming it as server a's only node. The probes stop checking the
   * killed primary; they check an unlisted replica only once the scenario adds it (when the application's config
   * names it).
   */
  failOver(): Promise<ClusterConfig>;
  /** Rows into a shard's copy, straight on its server. */
  fill(server: string, shard: number, rows: number): Promise<void>;
  /** `shardflake ARGS` as a child process, this stage's config in a file. */
  cli(args: string[], env?: Record<string, string>): ChildProcess;
  close(): Promise<void>;
}

const TABLES = {
  items: ['CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL)'],
};

/** The built CLI beside this module (dist/cli/main.js). */
const CLI_MAIN = fileURLToPath(new URL('../cli/main.js', import.meta.url));

const raw = (
  servers: Record<string, string | string[]>,
  logicalShards: number,
  extra: Record<string, unknown> = {},
) => ({
  servers,
  catalog: 'b',
  logicalShards,
  epoch: '2024-01-01T00:00:00Z',
  tables: TABLES,
  ...extra,
});

async function onNode<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = await connect(url);
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

export async function startStage(options: StageOptions): Promise<Stage> {
  const logicalShards = options.logicalShards ?? 4;
  const makeConfig = (servers: Record<string, string | string[]>, shards: number, source: string) =>
    validateConfig(raw(servers, shards, options.config), source);
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-faults-'));
  // Data kept across a stop (a folder of the stage's own, removed with it), so a server can be restarted.
  const dataDir = join(dir, 'data');
  const servers = await startEmbeddedServers(options.servers, { dir: dataDir }).catch(async (error) => {
    await rm(dir, { recursive: true, force: true });
    throw error;
  });
  let replica: EmbeddedReplica | undefined;
  const children = new Set<ChildProcess>();
  try {
    const failing = options.replicaOf ?? 'a';
    const at = servers.findIndex((s) => s.name === failing);
    if (at === -1) throw new Error(`no server ${failing} to give a replica`);
    // The server that fails over (a by default); `a` names it below.
    let a = servers[at] as EmbeddedServer;
    if (options.replica) {
      replica = await startEmbeddedReplica(a);
      // A replayed change that conflicts with a query on the replica (the probes' checks) waits up to this long
      // (default 30 s) before cancelling the query: a promotion with a backlog would wait as long.
      await onNode(replica.url, async (c) => {
        await c.query("ALTER SYSTEM SET max_standby_streaming_delay = '200ms'");
        await c.query('SELECT pg_reload_conf()');
      });
    }
    const urls: Record<string, string | string[]> = Object.fromEntries(servers.map((s) => [s.name, s.url]));
    if (replica && options.replica === 'listed') urls[failing] = [a.url, replica.url];
    const config = makeConfig(urls, logicalShards, 'bench faults');
    const initial = Object.fromEntries(
      Object.entries(urls).slice(0, options.initialServers ?? servers.length),
    );
    const initialConfig = makeConfig(initial, logicalShards, 'bench faults (initial)');
    await initCluster(initialConfig);
    const configFile = join(dir, 'config.json');
    // The file holds the servers' passwords: owner-only, removed with the stage.
    await writeFile(configFile, JSON.stringify(raw(urls, logicalShards, options.config)), { mode: 0o600 });
    const stage: Stage = {
      servers,
      replica,
      config,
      initialConfig,
      configFile,
      nodes: {
        ...Object.fromEntries(servers.map((s) => [s.name, s.url])),
        ...(replica && options.replica === 'listed' ? { [`${failing} (replica)`]: replica.url } : {}),
      },
      async syncReplica() {
        await onNode(a.url, async (c) => {
          const { rows } = await c.query(
            "SELECT application_name AS name FROM pg_stat_replication WHERE application_name LIKE 'replica%'",
          );
          const name = (rows[0] as { name: string } | undefined)?.name;
          if (!name) throw new Error(`server ${failing} has no streaming replica`);
          await c.query(`ALTER SYSTEM SET synchronous_standby_names = ${quoteLiteral(`"${name}"`)}`);
          await c.query("ALTER SYSTEM SET synchronous_commit = 'remote_write'");
          await c.query('SELECT pg_reload_conf()');
        });
      },
      async pauseReplay() {
        await onNode((replica as EmbeddedReplica).url, (c) => c.query('SELECT pg_wal_replay_pause()'));
      },
      async cutOffReplica() {
        await onNode((replica as EmbeddedReplica).url, async (c) => {
          await c.query("ALTER SYSTEM SET primary_conninfo = ''");
          await c.query('SELECT pg_reload_conf()');
        });
        await onNode(a.url, async (c) => {
          for (let i = 0; i < 200; i++) {
            const { rows } = await c.query(
              "SELECT count(*)::int AS n FROM pg_stat_replication WHERE application_name LIKE 'replica%'",
            );
            if ((rows[0] as { n: number }).n === 0) return;
            await new Promise((r) => setTimeout(r, 50));
          }
          throw new Error('the replica still streams from a');
        });
      },
      async restartA() {
        const port = a.port;
        await a.stop();
        a = await startEmbeddedServer(failing, { dir: dataDir, port });
        servers[at] = a;
      },
      async primaryPid() {
        const postmaster = await readPostmaster(a.dataDir);
        if (!postmaster) throw new Error(`server ${failing} has no postmaster.pid`);
        return postmaster.pid;
      },
      async killPrimary() {
        const postmaster = await readPostmaster(a.dataDir);
        if (!postmaster) throw new Error(`server ${failing} has no postmaster.pid`);
        process.kill(postmaster.pid, 'SIGKILL');
        // Gone when its port no longer answers.
        for (let i = 0; i < 200; i++) {
          const alive = await connect(a.url, { connectTimeoutMs: 200 }).then(
            (c) => c.end().then(() => true),
            () => false,
          );
          if (!alive) break;
          await new Promise((r) => setTimeout(r, 50));
        }
      },
      async failOver() {
        if (!replica) throw new Error('this stage has no replica');
        // As an HA tool does: replay resumed (a paused replica is not promoted until it is), then promotion, which
        // replays everything the replica received.
        await onNode(replica.url, (c) => c.query('SELECT pg_wal_replay_resume()')).catch(() => {});
        await replica.promote();
        delete stage.nodes[failing];
        return makeConfig(
          { ...urls, [failing]: replica.url },
          logicalShards,
          'bench faults (after the failover)',
        );
      },
      async fill(server, shard, rows) {
        const client = await connectServer(config, server);
        try {
          await client.query(
            `INSERT INTO ${qualified(shardSchema(config, shard), 'items')} (note) SELECT 'fill ' || g FROM generate_series(1, ${rows}) g`,
          );
        } finally {
          await client.end();
        }
      },
      cli(args, env = {}) {
        const child = spawn(process.execPath, [CLI_MAIN, ...args, '--config', configFile], {
          env: { ...process.env, ...env },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        children.add(child);
        child.on('exit', () => children.delete(child));
        return child;
      },
      async close() {
        for (const child of children) child.kill('SIGKILL');
        await replica?.stop().catch(() => {});
        await Promise.all(servers.map((s) => s.stop().catch(() => {})));
        await rm(dir, { recursive: true, force: true });
      },
    };
    return stage;
  } catch (error) {
    await replica?.stop().catch(() => {});
    await Promise.all(servers.map((s) => s.stop().catch(() => {})));
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

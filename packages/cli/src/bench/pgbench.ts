import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { redactSecrets, ShardflakeError } from 'shardflake/internal/errors/errors.js';

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
 * Single-row inserts (`INSERT INTO table (v) VALUES (1)`, one script per table, equal weights) from `clients`
 * connections for `seconds`: pgbench picks a script at random for every transaction, so that every table meets
 * the same load, transaction by transaction — on a shared machine whose speed drifts within seconds, measuring
 * the tables one after the other compares the drift instead. Returns, per table, inserts per second at its mean
 * latency (`clients` / mean latency). The password travels in PGPASSWORD, never on the command line (which other
 * local users can read), and `synchronous_commit` is off for pgbench's sessions only.
 */
export async function pgbenchInsertRates(
  pgbench: Pgbench,
  url: string,
  tables: readonly string[],
  options: { clients: number; seconds: number; protocol: PgbenchProtocol },
): Promise<number[]> {
  const target = new URL(url);
  const password = decodeURIComponent(target.password);
  target.password = '';
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-pgbench-'));
  try {
    const clients = String(options.clients);
    const args = ['-n', '-c', clients, '-j', clients, '-T', String(options.seconds), '-M', options.protocol];
    for (const [i, table] of tables.entries()) {
      const script = join(dir, `insert-${i}.sql`);
      await writeFile(script, `INSERT INTO ${table} (v) VALUES (1);\n`);
      args.push('-f', `${script}@1`);
    }
    args.push(target.toString());
    const env = { ...process.env, PGOPTIONS: '-c synchronous_commit=off', PGPASSWORD: password };
    let stdout: string;
    try {
      ({ stdout } = await run(pgbench.binary, args, { env }));
    } catch (error) {
      const e = error as { stderr?: string; message?: string };
      const why = (e.stderr ?? e.message ?? '').trim().split('\n').at(-1) ?? '';
      throw new ShardflakeError('DATABASE_ERROR', `pgbench failed: ${redactSecrets(why)}`, { cause: error });
    }
    // One block per script ("SQL script 2: …", then " - latency average = 0.223 ms"); one script alone gets none.
    const blocks = tables.length === 1 ? [stdout] : stdout.split(/^SQL script \d+:/m).slice(1);
    return tables.map((table, i) => {
      const ms = /latency average = ([0-9.]+) ms/.exec(blocks[i] ?? '')?.[1];
      if (ms === undefined || !(Number(ms) > 0)) {
        throw new ShardflakeError('DATABASE_ERROR', `pgbench printed no latency for ${table}`);
      }
      return (options.clients * 1000) / Number(ms);
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

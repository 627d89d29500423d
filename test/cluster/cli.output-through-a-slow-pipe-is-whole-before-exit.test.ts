import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { CLI_MAIN } from '../support/cli.js';
import { sqlRows, useServers } from '../support/postgres.js';

/**
 * Issue 32, item 2: piped CLI output was cut at 64 KiB with exit code 0 (`cluster sql … | wc -c` gave 131,072 of
 * 227,977 bytes; `cluster status --json` stopped at byte 65,536): the CLI ended with process.exit() while stdout,
 * a pipe whose reader had not caught up, still held data. Here the CLI's stdout is a pipe straight into a second
 * process that reads 2 KiB every 10 ms; that reader counts and keeps everything it got. Every byte must arrive,
 * the JSON parse whole, and the CLI still exit at once after the last byte (not held by its pools or timers).
 */
const servers = await useServers(1);
const SHARDS = 512;
const raw = {
  servers: { a: servers[0]?.url },
  catalog: 'a',
  logicalShards: SHARDS,
  epoch: '2024-01-01T00:00:00Z',
  tables: {
    photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint, caption text)',
  },
};
const config = validateConfig(raw, 'slow-pipe config');
await initCluster(config);
// 2,000 rows of 100 characters in shard 0: a table of ≈ 230 kB from `cluster sql`.
await sqlRows(
  servers[0]?.url as string,
  `INSERT INTO "${shardSchema(config, 0)}".photos (user_id, caption)
   SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g`,
);
const dir = await mkdtemp(join(tmpdir(), 'shardflake-slow-pipe-'));
after(() => rm(dir, { recursive: true, force: true }));
const configFile = join(dir, 'cluster.json');
await writeFile(configFile, JSON.stringify(raw));

/** A reader that takes 2 KiB every 10 ms and writes what it got to a file at the end. */
const SLOW_READER = `
const { writeFileSync } = require('node:fs');
const chunks = [];
let ended = false;
process.stdin.on('end', () => {
  ended = true;
  writeFileSync(process.argv[1], Buffer.concat(chunks));
});
// One loop: take 2 KiB (or what is left), wait 10 ms; when nothing is buffered, wait for more.
function take() {
  const chunk = process.stdin.read(2048) ?? process.stdin.read();
  if (chunk === null) {
    if (!ended) process.stdin.once('readable', take);
    return;
  }
  chunks.push(chunk);
  setTimeout(take, 10);
}
process.stdin.once('readable', take);
`;

/**
 * Runs the CLI with its stdout piped into the slow reader, through a shell: an OS pipe (64 KiB), as `| wc -c` is
 * (Node's own 'pipe' between parent and child is a socket pair, whose larger buffer hides the loss). Resolves with
 * the bytes the reader got, the CLI's exit code and its stderr.
 */
async function throughSlowReader(args: string[]) {
  const out = join(dir, `out-${Math.random().toString(36).slice(2)}`);
  const script =
    'node="$1"; out="$2"; shift 2; "$node" "$@" | "$node" -e "$SLOW_READER" "$out"; exit "$' +
    '{PIPESTATUS[0]}"';
  const shell = spawn('bash', ['-c', script, 'slow-pipe', process.execPath, out, CLI_MAIN, ...args], {
    env: { ...process.env, SLOW_READER },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  shell.stderr.on('data', (d) => {
    stderr += d;
  });
  const code = await new Promise<number | null>((resolve) => shell.on('close', (c) => resolve(c)));
  return { code, stderr, bytes: await readFile(out) };
}

test('cluster status --json through a slow pipe: every byte of a status of 512 shards arrives and parses', async () => {
  const { code, stderr, bytes } = await throughSlowReader([
    'cluster',
    'status',
    '--json',
    '--config',
    configFile,
  ]);
  assert.equal(code, 0, stderr);
  assert.ok(bytes.length > 2 * 65_536, `a status bigger than the pipe's buffer (${bytes.length} bytes)`);
  const text = bytes.toString('utf8');
  assert.ok(text.endsWith('}\n'), `the whole JSON arrived (${bytes.length} bytes): …${text.slice(-40)}`);
  const status = JSON.parse(text);
  assert.equal(status.shards.length, SHARDS);
  assert.equal(status.shards.at(-1).shard, SHARDS - 1);
});

test('cluster sql through a slow pipe: the whole table and its row count arrive, in JSON too', async () => {
  const query = 'SELECT id, caption FROM photos ORDER BY id';
  const table = await throughSlowReader(['cluster', 'sql', query, '--config', configFile]);
  assert.equal(table.code, 0, table.stderr);
  const text = table.bytes.toString('utf8');
  assert.ok(text.length > 200_000, `${text.length} bytes`);
  assert.ok(
    text.endsWith('(2000 rows)\n'),
    `ends with the row count (${text.length} bytes): …${text.slice(-40)}`,
  );
  assert.equal(text.split('\n').filter((l) => l.includes('x'.repeat(100))).length, 2000);

  const json = await throughSlowReader(['cluster', 'sql', query, '--json', '--config', configFile]);
  assert.equal(json.code, 0, json.stderr);
  const jsonText = json.bytes.toString('utf8');
  assert.ok(jsonText.endsWith('}\n'), `the whole JSON arrived (${jsonText.length} bytes)`);
  assert.equal(JSON.parse(jsonText).rows.length, 2000);
});

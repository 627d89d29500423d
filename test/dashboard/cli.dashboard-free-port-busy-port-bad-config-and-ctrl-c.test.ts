import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { freePort } from '../../packages/embedded/src/embedded.js';
import { makeCluster, rawConfig } from '../move/fixture.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword, passwordOf } from '../support/secrets.js';

const servers = await useServers(1);
await makeCluster(servers, 4);
const dir = await mkdtemp(join(tmpdir(), 'shardflake-dashboard-cli-'));
const configFile = async (name: string, content: unknown) => {
  const path = join(dir, name);
  await writeFile(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
};

/** One line on stderr, nothing on stdout, exit code `code`. */
function oneLine(
  run: { code: number | null; stdout: string; stderr: string },
  code: number,
  pattern: RegExp,
) {
  assert.equal(run.code, code, run.stderr);
  assert.equal(run.stdout, '');
  assert.match(run.stderr, pattern);
  assert.equal(run.stderr.trimEnd().split('\n').length, 1, run.stderr);
  assert.doesNotMatch(run.stderr, /\bat .*\.js:\d+/, 'no stack');
  assertNoPassword(
    run.stderr,
    servers.map((s) => s.url),
    'stderr',
  );
}

test('cluster dashboard: --port 0 prints the URL it picked and serves /api/status; a busy port is one line; Ctrl-C stops it', async () => {
  const path = await configFile('cluster.json', rawConfig(servers, 4));
  const first = startCli(['cluster', 'dashboard', '--config', path, '--port', '0']);
  const printed = await first.waitFor(
    'stdout',
    /dashboard: http:\/\/127\.0\.0\.1:\d+\/ \(Ctrl-C stops it\)\n/,
  );
  const url = /(http:\/\/127\.0\.0\.1:(\d+)\/)/.exec(printed);
  assert.ok(url);
  const status = (await (await fetch(`${url[1]}api/status`)).json()) as { shards: unknown[] };
  assert.equal(status.shards.length, 4);
  assert.match(await (await fetch(url[1] as string)).text(), /<title>shardflake dashboard<\/title>/);

  const busy = await startCli(['cluster', 'dashboard', '--config', path, '--port', url[2] as string]).done;
  oneLine(
    busy,
    2,
    new RegExp(`^shardflake: error \\[INVALID_ARGUMENT\\]: port ${url[2]} on 127\\.0\\.0\\.1 is in use`),
  );

  first.child.kill('SIGINT');
  const stopped = await first.done;
  assert.equal(stopped.code, 130, 'the exit code of a process stopped by SIGINT');
  assert.equal(stopped.stderr, '');
  await assert.rejects(fetch(`${url[1]}api/status`), 'nothing listens after Ctrl-C');
});

test('cluster dashboard refuses bad input with one line before listening', async () => {
  const notJson = await configFile('broken.json', '{ "servers": ');
  oneLine(
    await startCli(['cluster', 'dashboard', '--config', notJson, '--port', '0']).done,
    2,
    /^shardflake: error \[INVALID_CONFIG\]: .*is not valid JSON/,
  );
  const port = await freePort();
  // The real server's password on a port where nothing listens: the refusal must not print it.
  const down = await configFile('down.json', {
    ...rawConfig(servers, 4),
    servers: { a: `postgres://postgres:${passwordOf(servers[0]?.url as string)}@127.0.0.1:${port}/postgres` },
  });
  oneLine(
    await startCli(['cluster', 'dashboard', '--config', down, '--port', '0']).done,
    3,
    /^shardflake: error \[SERVER_UNREACHABLE\]: catalog server a: .*unreachable/,
  );
  const good = await configFile('good.json', rawConfig(servers, 4));
  oneLine(
    await startCli(['cluster', 'dashboard', '--config', good, '--port', '70000']).done,
    2,
    /^shardflake: error \[INVALID_ARGUMENT\]: --port must be a whole number from 0 to 65535/,
  );
});

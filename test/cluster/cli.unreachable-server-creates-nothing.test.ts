import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { freePort } from '../../packages/embedded/src/embedded.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';

const [server] = await useServers(1);
const dir = mkdtempSync(join(tmpdir(), 'shardflake-cli-'));

function cli(...args: string[]) {
  const result = spawnSync(process.execPath, ['packages/cli/dist/cli/main.js', ...args], {
    encoding: 'utf8',
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

function writeConfig(name: string, config: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof config === 'string' ? config : JSON.stringify(config));
  return path;
}

describe('shardflake cluster CLI, bad input', () => {
  it('an unreachable server: one line, exit 3, nothing created on the reachable server', async () => {
    const deadPort = await freePort();
    const path = writeConfig('unreachable.json', {
      servers: { a: defined(server).url, b: `postgres://postgres:hunter2@127.0.0.1:${deadPort}/postgres` },
      catalog: 'a',
      logicalShards: 16,
      tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id())' },
    });
    const { code, stderr } = cli('cluster', 'init', '--config', path);
    assert.equal(code, 3);
    assert.equal(stderr.trim().split('\n').length, 1, stderr);
    assert.match(stderr, /SERVER_UNREACHABLE.*server b/);
    assert.doesNotMatch(stderr, /hunter2/);
    assertNoPassword(stderr, [defined(server).url], 'stderr');
    const client = await connect(defined(server).url);
    const { rows } = await client.query(
      "SELECT nspname FROM pg_namespace WHERE nspname IN ('shardflake', 'shard_0000')",
    );
    await client.end();
    assert.deepEqual(rows, []);
  });

  const bad: [string, string | object, RegExp][] = [
    ['not JSON', '{ servers: a }', /INVALID_CONFIG.*not valid JSON/],
    [
      'an unknown server',
      {
        servers: { a: 'postgres://x@h/db' },
        catalog: 'z',
        logicalShards: 4,
        tables: { t: 'CREATE TABLE t (id bigint PRIMARY KEY)' },
      },
      /UNKNOWN_SERVER/,
    ],
    [
      'logicalShards 0',
      {
        servers: { a: 'postgres://x@h/db' },
        catalog: 'a',
        logicalShards: 0,
        tables: { t: 'CREATE TABLE t (id bigint PRIMARY KEY)' },
      },
      /logicalShards/,
    ],
    [
      'logicalShards 8193',
      {
        servers: { a: 'postgres://x@h/db' },
        catalog: 'a',
        logicalShards: 8193,
        tables: { t: 'CREATE TABLE t (id bigint PRIMARY KEY)' },
      },
      /logicalShards/,
    ],
    [
      'a table statement escaping its schema',
      {
        servers: { a: 'postgres://x@h/db' },
        catalog: 'a',
        logicalShards: 4,
        tables: { t: 'CREATE TABLE public.t (id bigint)' },
      },
      /schema-qualified/,
    ],
  ];
  for (const [what, config, pattern] of bad) {
    it(`${what}: one line, exit 2`, () => {
      const path = writeConfig(`${what.replaceAll(' ', '-')}.json`, config);
      for (const command of ['init', 'status', 'migrate']) {
        const { code, stderr, stdout } = cli('cluster', command, '--config', path);
        assert.equal(code, 2, stderr);
        assert.equal(stdout, '');
        assert.equal(stderr.trim().split('\n').length, 1, stderr);
        assert.match(stderr, pattern);
      }
    });
  }
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pg from 'pg';
import { freePort } from '../../packages/embedded/src/embedded.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { CLI_MAIN } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { startReplica } from '../support/replicas.js';
import { assertNoPassword } from '../support/secrets.js';

/**
 * Node lists that cannot be right, each found when `cluster init` connects: one line on stderr naming the node
 * (password redacted), a non-zero exit, and nothing created on any server.
 */
const [a, b] = await useServers(2);
assert.ok(a && b);
const replicaOfA = await startReplica(a);
const dir = mkdtempSync(join(tmpdir(), 'shardflake-nodes-'));
const dead = `postgres://postgres:hunter2@127.0.0.1:${await freePort()}/postgres`;

function init(servers: Record<string, string | string[]>) {
  const path = join(dir, 'cluster.json');
  writeFileSync(
    path,
    JSON.stringify({
      servers,
      catalog: 'a',
      logicalShards: 4,
      tables: { notes: 'CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT next_id())' },
    }),
  );
  const run = spawnSync(process.execPath, [CLI_MAIN, 'cluster', 'init', '--config', path], {
    encoding: 'utf8',
  });
  return { code: run.status, stderr: run.stderr.trim() };
}

async function schemasOn(url: string): Promise<string[]> {
  const client = new pg.Client(url);
  await client.connect();
  const { rows } = await client.query(
    "SELECT nspname FROM pg_namespace WHERE nspname ~ '^(shardflake|shard_)'",
  );
  await client.end();
  return rows.map((r) => r.nspname);
}

const port = (url: string) => new URL(url).port;

describe('cluster init refuses bad node lists and changes nothing', () => {
  const cases: [string, Record<string, string | string[]>, number, RegExp][] = [
    ['two primaries', { a: [a.url, b.url] }, 2, /INVALID_CONFIG.*server a has 2 primaries/],
    [
      'a replica of another server',
      { a: a.url, b: replicaOfA.url },
      2,
      new RegExp(
        `INVALID_CONFIG.*server b: node \\S+:${replicaOfA.port}/\\S+ is the same database as server a`,
      ),
    ],
    [
      'a node of another system',
      { a: [replicaOfA.url, b.url] },
      2,
      new RegExp(
        `INVALID_CONFIG.*node \\S+:${replicaOfA.port}/\\S+ is not a replica of its primary \\S+:${port(b.url)}/`,
      ),
    ],
    ['no primary', { a: [replicaOfA.url] }, 3, /NO_PRIMARY.*is a replica/],
    [
      'an unreachable node',
      { a: [a.url, dead] },
      3,
      new RegExp(
        `SERVER_UNREACHABLE.*server a: node postgres://postgres:\\*\\*\\*\\*@127.0.0.1:${port(dead)}/postgres`,
      ),
    ],
  ];
  for (const [what, servers, code, pattern] of cases) {
    it(what, async () => {
      const run = init(servers);
      assert.equal(run.code, code, run.stderr);
      assert.equal(run.stderr.split('\n').length, 1, run.stderr);
      assert.match(run.stderr, pattern);
      assert.doesNotMatch(run.stderr, /hunter2/);
      assertNoPassword(run.stderr, [a.url, b.url, replicaOfA.url], 'stderr');
      assert.deepEqual(await schemasOn(a.url), []);
      assert.deepEqual(await schemasOn(b.url), []);
    });
  }

  it('config parsing refuses an empty list and a node listed twice, before connecting', () => {
    const parse = (servers: unknown) => () =>
      validateConfig({
        servers,
        catalog: 'a',
        logicalShards: 4,
        tables: { t: 'CREATE TABLE t (id bigint PRIMARY KEY)' },
      });
    assert.throws(parse({ a: [] }), /servers\.a needs a postgres:\/\/ URL or a non-empty list/);
    assert.throws(
      parse({ a: [a.url, a.url] }),
      /servers\.a lists node postgres:\/\/postgres:\*\*\*\*@\S+ twice/,
    );
    assert.throws(parse({ a: a.url, b: [b.url, a.url] }), /listed under both servers\.a and servers\.b/);
    assert.deepEqual(parse({ a: [a.url, replicaOfA.url] })().nodes, { a: [a.url, replicaOfA.url] });
  });
});

import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';

const servers = await useServers(2);

const cli = (...args: string[]) => startCli(args).done;

test('CLI on two real servers: init, status --json (SPEC shape), init again (harmless), migrate; no password printed', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-cli-cluster-'));
  const base = {
    servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
    catalog: 'a',
    logicalShards: 8,
    epoch: '2024-01-01T00:00:00Z',
    tables: {
      photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL)',
    },
  };
  const path = join(dir, 'cluster.json');
  await writeFile(path, JSON.stringify(base));
  const outputs: string[] = [];
  const run = async (...args: string[]) => {
    const r = await cli('cluster', ...args, '--config', path);
    outputs.push(r.stdout, r.stderr);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return r;
  };

  const init = JSON.parse((await run('init', '--json')).stdout);
  assert.equal(init.created, 8);
  assert.deepEqual(init.perServer, { a: 4, b: 4 });

  const status = JSON.parse((await run('status', '--json')).stdout);
  assert.equal(typeof status.version, 'number');
  assert.equal(status.shards.length, 8);
  status.shards.forEach((s: { shard: number; server: string; schema: string }, i: number) => {
    assert.equal(s.shard, i);
    assert.ok(s.server === 'a' || s.server === 'b');
    assert.equal(typeof s.schema, 'string');
  });

  const again = await run('init');
  assert.match(again.stdout, /created 0, already there 8/);
  const after = JSON.parse((await run('status', '--json')).stdout);
  assert.deepEqual(after.shards, status.shards);
  assert.equal(after.version, status.version, 'a rerun does not bump the map version');

  await writeFile(
    path,
    JSON.stringify({
      ...base,
      migrations: [{ version: 1, name: 'caption', sql: 'ALTER TABLE photos ADD COLUMN caption text' }],
    }),
  );
  const migrate = JSON.parse((await run('migrate', '--json')).stdout);
  assert.equal(migrate.migrated, 8);
  assert.deepEqual(migrate.failed, []);
  const text = await run('status');
  assert.match(text.stdout, /schema versions \(target v1\): v1: 8/);

  for (const out of outputs) {
    for (const s of servers) assert.ok(!out.includes(s.url), 'a server url with its password was printed');
    assertNoPassword(
      out,
      servers.map((s) => s.url),
      'the output',
    );
  }
});

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { freePort } from '../../packages/embedded/src/embedded.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { makeCluster, rawConfig } from './fixture.js';

/**
 * Issue 21, item 6: `cluster cleanup` with a server that does not answer names what it skipped and does not claim
 * the cluster is clean ("nothing to clean up" was printed after skipping it).
 */
test('cluster cleanup with a server down says it skipped it and that nothing was cleaned up on the servers it reached, and never "nothing to clean up"', async () => {
  const servers = await useServers(1);
  await makeCluster(servers, 2);
  const down = `postgres://postgres:secret@127.0.0.1:${await freePort()}/postgres`;
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-cleanup-down-'));
  try {
    const file = join(dir, 'config.json');
    const raw = rawConfig(servers, 2);
    await writeFile(file, JSON.stringify({ ...raw, servers: { ...(raw.servers as object), z: down } }));
    const run = await startCli(['cluster', 'cleanup', '--config', file]).done;
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^skipped: server z: .*unreachable/m);
    assert.match(
      run.stdout,
      /nothing cleaned up on the servers reached; run again once the skipped ones answer/,
    );
    assert.doesNotMatch(run.stdout, /nothing to clean up/);
    assert.doesNotMatch(run.stdout + run.stderr, /secret/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

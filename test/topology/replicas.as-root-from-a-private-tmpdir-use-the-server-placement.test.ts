import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { startEmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { replicaCaughtUp, startEmbeddedReplica } from '../../packages/embedded/src/embedded-replica.js';
import { unreachableBy } from '../../packages/embedded/src/folder-access.js';
import { binariesFor, DATA_HOME } from '../../packages/embedded/src/root-placement.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';

/**
 * The streaming-replica harness starts PostgreSQL through the same placement as every embedded server
 * (root-placement.ts): as root with a private TMPDIR (mode 0700, as `mktemp -d` or /root give), the replica's data
 * folder — which the `postgres` user could not enter there — is placed under DATA_HOME, its binary is the one
 * `binariesFor` gives (reachable by that user), it streams from its primary, and stop() removes the placed data.
 * Before, the harness spawned the packaged binary and a data folder under TMPDIR directly: EACCES.
 */
const isRoot = process.getuid?.() === 0;
const privateTmp = await mkdtemp(join(tmpdir(), 'shardflake-private-tmp-'));
await chmod(privateTmp, 0o700);
after(() => rm(privateTmp, { recursive: true, force: true }));

it('as root under a private TMPDIR, a replica is placed where postgres can reach it and streams', {
  skip: isRoot ? false : 'needs root: only root runs its servers as another user',
}, async () => {
  const saved = process.env.TMPDIR;
  process.env.TMPDIR = privateTmp;
  try {
    assert.equal(tmpdir(), privateTmp);
    const primary = await startEmbeddedServer('a');
    after(() => primary.stop());
    const replica = await startEmbeddedReplica(primary);
    after(() => replica.stop());
    assert.ok(replica.dataDir.startsWith(`${DATA_HOME}/`), `placed: ${replica.dataDir}`);
    const owner = await stat(replica.dataDir);
    assert.equal(
      replica.binary,
      join((await binariesFor({ uid: owner.uid, gid: owner.gid })).bin, 'postgres'),
    );
    assert.equal(await unreachableBy('postgres', replica.binary), null);
    const client = await connect(primary.url);
    try {
      await client.query('CREATE TABLE placed (n int); INSERT INTO placed VALUES (7)');
    } finally {
      await client.end();
    }
    await replicaCaughtUp(primary, replica);
    const reader = await connect(replica.url);
    try {
      assert.deepEqual((await reader.query('SELECT n FROM placed')).rows, [{ n: 7 }]);
    } finally {
      await reader.end();
    }
    await replica.stop();
    assert.equal(await stat(replica.dataDir).catch(() => null), null, 'stop() removed the placed data');
  } finally {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  }
});

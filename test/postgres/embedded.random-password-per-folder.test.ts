import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { startEmbeddedServer } from '@shardflake/embedded';
import { connect, isShardflakeError } from 'shardflake';
import { passwordFile } from '../../packages/embedded/src/embedded.js';

/**
 * Every embedded server had the same superuser password, written in the source: any local user who reached a
 * `demo --keep` server's port could log in as superuser. Now each data folder gets its own random password at
 * initdb, kept owner-only beside the data directory and reused by later starts of that folder.
 */
const base = await mkdtemp(join(tmpdir(), 'shardflake-password-'));
// The servers run as the `postgres` user when the tests run as root: it must reach the folder.
await chmod(base, 0o755);
after(() => rm(base, { recursive: true, force: true }));

/** The password every embedded server had before (the one an attacker would try first). */
const OLD_FIXED_PASSWORD = 'shardflake';

const withPassword = (url: string, password: string) => {
  const u = new URL(url);
  u.password = password;
  return u.toString();
};

describe('embedded servers: a random password per data folder', () => {
  it('two folders get different passwords, each in a 0600 file, and the old fixed one is refused', async () => {
    const one = await startEmbeddedServer('a', { dir: join(base, 'one') });
    const two = await startEmbeddedServer('a', { dir: join(base, 'two') });
    try {
      const p1 = new URL(one.url).password;
      const p2 = new URL(two.url).password;
      assert.notEqual(p1, p2);
      assert.ok(p1.length >= 32, `a long password (${p1.length} characters)`);
      for (const [server, password] of [
        [one, p1],
        [two, p2],
      ] as const) {
        const file = passwordFile(join(server.dataDir, '..'), 'a');
        assert.equal((await readFile(file, 'utf8')).trim(), password);
        assert.equal((await stat(file)).mode & 0o777, 0o600);
        const client = await connect(server.url);
        await client.end();
        await assert.rejects(connect(withPassword(server.url, OLD_FIXED_PASSWORD)), (e: unknown) => {
          assert.ok(isShardflakeError(e, 'AUTH_FAILED'), String(e)); // a refused login (issue 32)
          assert.equal(e.sqlState, '28P01'); // invalid_password
          return true;
        });
      }
      // One server's password does not open the other.
      await assert.rejects(connect(withPassword(two.url, p1)));
    } finally {
      await Promise.all([one.stop(), two.stop()]);
    }
  });

  it('a restart on the same folder reads the same password and answers', async () => {
    const dir = join(base, 'one');
    const again = await startEmbeddedServer('a', { dir });
    try {
      assert.equal(new URL(again.url).password, (await readFile(passwordFile(dir, 'a'), 'utf8')).trim());
      const client = await connect(again.url);
      const { rows } = await client.query('SELECT 1 AS one');
      await client.end();
      assert.equal(rows[0].one, 1);
    } finally {
      await again.stop();
    }
  });

  it('a data directory whose password file is gone: one INVALID_ARGUMENT sentence saying what to do', async () => {
    const dir = join(base, 'two');
    await rm(passwordFile(dir, 'a'));
    await assert.rejects(startEmbeddedServer('a', { dir }), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'INVALID_ARGUMENT'), String(e));
      assert.match(e.message, /has no password file .*; remove .* and start again$/);
      return true;
    });
  });
});

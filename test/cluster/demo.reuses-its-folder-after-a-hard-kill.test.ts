import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { runDemo } from '../../packages/cli/src/demo/demo.js';
import { findLeftovers, stopLeftovers } from '../../packages/cli/src/demo/demo-leftovers.js';
import { startEmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { assertNoPassword } from '../support/secrets.js';

const base = await mkdtemp(join(tmpdir(), 'shardflake-demo-'));
// The servers run as the `postgres` user when the tests run as root: it must reach the folder.
await chmod(base, 0o755);
after(() => rm(base, { recursive: true, force: true }));

describe('demo', () => {
  it('stops the servers a hard-killed demo left running, but not those of a live one', async () => {
    const dir = join(base, 'killed');
    // A stand-in for a demo process (its command line names a demo): it starts server a and waits.
    const script = join(base, 'demo-stand-in.mjs');
    const embedded = new URL('../../packages/embedded/src/embedded.js', import.meta.url).href;
    await writeFile(
      script,
      `import { startEmbeddedServer } from ${JSON.stringify(embedded)};
       await startEmbeddedServer('a', { dir: process.argv[2], persistent: true });
       process.stdout.write('up\\n');
       setInterval(() => {}, 1000);`,
    );
    const child = spawn(process.execPath, [script, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d) => String(d).includes('up') && resolve());
      child.on('exit', (code) => reject(new Error(`stand-in exited with ${code}`)));
    });
    const lines: string[] = [];
    await assert.rejects(
      stopLeftovers(dir, ['a', 'b'], (l) => lines.push(l)),
      (e: unknown) => {
        assert.ok(isShardflakeError(e, 'INVALID_ARGUMENT'));
        assert.match(e.message, new RegExp(`another demo \\(process ${child.pid}\\)`));
        return true;
      },
    );

    child.kill('SIGKILL'); // its server is now an orphan holding the data directory
    await new Promise((r) => child.once('exit', r));
    assert.equal((await findLeftovers(dir, ['a', 'b'])).length, 1);
    await stopLeftovers(dir, ['a', 'b'], (l) => lines.push(l));
    assert.match(lines.join('\n'), /stopping server a .* that a killed demo left running/);
    assert.deepEqual(await findLeftovers(dir, ['a', 'b']), []);
    // The folder is usable again.
    const again = await startEmbeddedServer('a', { dir, persistent: true });
    await again.stop();
  });

  it('runs small on servers with synchronous_commit off, and names the layout limits in its summary', async () => {
    const lines: string[] = [];
    const result = await runDemo({
      dir: join(base, 'small'),
      logicalShards: 8,
      users: 10,
      photosPerUser: 2,
      likes: 10,
      log: (l) => lines.push(l),
    });
    try {
      const client = await connect(defined(result.servers[1]).url);
      const { rows } = await client.query('SHOW synchronous_commit');
      await client.end();
      assert.equal(rows[0].synchronous_commit, 'off');
    } finally {
      await Promise.all(result.servers.map((s) => s.stop()));
    }
    const overflow = defined(result.config.layout.signedOverflowAt).toISOString().slice(0, 10);
    assert.ok(
      lines.some((l) => l.includes(`fit a signed bigint until ${overflow}`)),
      lines.join('\n'),
    );
    assertNoPassword(
      lines.join('\n'),
      result.servers.map((s) => s.url),
      "the demo's log",
    );
  });
});

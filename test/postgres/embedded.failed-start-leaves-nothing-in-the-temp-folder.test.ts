import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { startEmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { DATA_HOME } from '../../packages/embedded/src/root-placement.js';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';

/**
 * A start that fails after initdb (here: the port asked for is taken) removes what it made: its temp folder, and
 * the data directory it placed elsewhere when running as root (the temp folder here is private, 0700, so the
 * postgres user cannot reach it and the data is placed under DATA_HOME).
 */
const temp = mkdtempSync(join(tmpdir(), 'shardflake-failed-start-'));
const previous = process.env.TMPDIR;
after(() => {
  process.env.TMPDIR = previous;
  if (previous === undefined) delete process.env.TMPDIR;
  rmSync(temp, { recursive: true, force: true });
});

test('a start on a taken port fails with one typed error and leaves the temp folder empty', async () => {
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  const port = (holder.address() as { port: number }).port;
  const name = `clash${process.pid}`;
  process.env.TMPDIR = temp;
  try {
    await assert.rejects(startEmbeddedServer(name, { port }), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'SERVER_UNREACHABLE'), String(e));
      assert.match(e.message, new RegExp(`could not start embedded PostgreSQL ${name}`));
      return true;
    });
  } finally {
    process.env.TMPDIR = previous;
    holder.close();
  }
  assert.deepEqual(readdirSync(temp), [], 'nothing left in the temp directory');
  if (existsSync(DATA_HOME)) {
    const placed = readdirSync(DATA_HOME).filter((f) => existsSync(join(DATA_HOME, f, name)));
    assert.deepEqual(placed, [], 'no data directory left where root placement put it');
  }
});

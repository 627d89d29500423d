import { createHash, randomBytes } from 'node:crypto';
import { cp, lstat, mkdir, readFile, realpath, rename, rm, stat, symlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { unreachableBy } from './folder-access.js';
import { packagedBinaries, type ServerBinaries, type ServerUser } from './server-process.js';

/**
 * Where a server's files go when root runs it. PostgreSQL refuses to run as root, so its processes run as the
 * `postgres` user, who must be able to enter every folder on the way to the binaries and to the data directory.
 * A project cloned under /root or into a `mktemp -d` folder (mode 700) is closed to that user, and `npm start`
 * would fail. So, as root and only then:
 * - binaries the server's user cannot reach are copied once per PostgreSQL build to a root-owned cache,
 *   `/var/cache/shardflake/postgres-<version>-<platform>` (the build finds its libraries relative to itself);
 * - a data directory it cannot reach is placed in `/var/lib/shardflake/data/<hash of the folder>/<name>`, and
 *   the folder the caller named gets a symlink to it, so that `<dir>/<name>` still leads to the data.
 * The caller's own folders are never opened up (no chmod of anything it did not create).
 */
export const BINARY_CACHE = '/var/cache/shardflake';
export const DATA_HOME = '/var/lib/shardflake/data';

/**
 * The binaries a server run as `user` starts from: the packaged ones for the caller's own user, or, as root (the
 * server runs as `postgres`), a copy that user can reach. Every place that starts a PostgreSQL binary asks here
 * (embedded servers, the streaming-replica harness, tests that start a server process themselves), so a clone in a
 * private folder works for all of them or for none.
 */
export async function binariesFor(user: ServerUser | undefined): Promise<ServerBinaries> {
  const binaries = packagedBinaries();
  return user ? reachableBinaries(binaries) : binaries;
}

/** A folder root creates for shared use: root-owned and writable by root alone, or refused. */
async function rootOwnedFolder(path: string): Promise<void> {
  await mkdir(path, { recursive: true, mode: 0o755 });
  const info = await stat(path);
  if (info.uid !== 0 || (info.mode & 0o022) !== 0) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `${path} must belong to root and be writable by root alone (it holds the PostgreSQL binaries and data that run as root's servers); fix its owner and mode, or remove it`,
    );
  }
}

/** Copies in progress in this process, by target: servers started together share one copy. */
const copying = new Map<string, Promise<ServerBinaries>>();

/** The binaries, or a copy of them the user `postgres` can reach. */
export async function reachableBinaries(binaries: ServerBinaries): Promise<ServerBinaries> {
  if (!(await unreachableBy('postgres', join(binaries.bin, 'postgres')))) return binaries;
  const native = dirname(binaries.bin);
  const manifest = JSON.parse(await readFile(join(native, '..', 'package.json'), 'utf8')) as {
    version: string;
  };
  const target = join(BINARY_CACHE, `postgres-${manifest.version}-${process.platform}-${process.arch}`);
  let copy = copying.get(target);
  if (!copy) {
    copy = copyOnce(native, target);
    copying.set(target, copy);
    // A failed copy is tried again by the next server, not remembered.
    copy.catch(() => copying.delete(target));
  }
  return copy;
}

async function copyOnce(native: string, target: string): Promise<ServerBinaries> {
  const copied = { bin: join(target, 'bin') };
  if (await stat(join(copied.bin, 'postgres')).catch(() => null)) return copied;
  await rootOwnedFolder(BINARY_CACHE);
  // Copied beside, then renamed into place: a run killed half-way, or two runs at once, never leave a partial
  // copy under the final name.
  const partial = `${target}.${randomBytes(6).toString('hex')}.partial`;
  await rm(partial, { recursive: true, force: true });
  await cp(native, partial, { recursive: true, verbatimSymlinks: true, preserveTimestamps: true });
  try {
    await rename(partial, target);
  } catch (error) {
    await rm(partial, { recursive: true, force: true });
    if (!(await stat(join(copied.bin, 'postgres')).catch(() => null))) throw error;
  }
  return copied;
}

/**
 * The data directory the server uses for `<base>/<name>`: that one when the user `postgres` can reach it, else
 * its place under DATA_HOME, with `<base>/<name>` made a symlink to it.
 */
export async function reachableDataDir(base: string, name: string): Promise<string> {
  const named = join(base, name);
  const existing = await lstat(named).catch(() => null);
  if (existing?.isSymbolicLink()) return realpath(named);
  if (!(await unreachableBy('postgres', named))) return named;
  if (existing) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `running as root, PostgreSQL runs as the user postgres, who cannot reach the data directory ${named}; move the folder where that user can enter, or remove ${named}`,
    );
  }
  const folder = createHash('sha256')
    .update(await realpath(base))
    .digest('hex')
    .slice(0, 16);
  await rootOwnedFolder(DATA_HOME);
  const placed = join(DATA_HOME, folder, name);
  await mkdir(dirname(placed), { recursive: true, mode: 0o755 });
  await symlink(placed, named);
  return placed;
}

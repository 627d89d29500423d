import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { chown, mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { endianness, tmpdir } from 'node:os';
import { join } from 'node:path';
import crc32c from 'crc-32/crc32c.js';
import { runToCompletion, type ServerBinaries, type ServerUser } from './server-process.js';

/**
 * A data directory initialised once per machine, user and PostgreSQL build, and copied into each new throwaway
 * server instead of running initdb (`EmbeddedOptions.initdbTemplate`). For test suites: here initdb is ≈ 0.55 s
 * of the ≈ 0.67 s of CPU a server costs from start to stop, a copy of its 40 MB ≈ 0.1 s.
 *
 * A copy must not pass for its template's twin. PostgreSQL names a cluster by the system identifier initdb draws,
 * and shardflake tells servers apart by it (two servers of one system are refused as one database listed twice;
 * a replica must share its primary's). So each copy gets its own: a new random identifier in `global/pg_control`
 * (whose CRC-32C is then recomputed) and in the long header of each WAL segment's first page (`xlp_sysid`, at
 * byte 24), which the server checks against pg_control when it reads the WAL at start. The CRC's place is found,
 * not assumed (the first offset whose 4 bytes are the CRC-32C of everything before it), and the old identifier
 * must be where both places say: any surprise (another layout) makes the copy fail, and the caller runs initdb.
 *
 * The template's superuser password is its own (random, owner-only beside the template): a copy answers to it
 * until the caller sets the server's own password, its first statement (embedded.ts).
 */
export interface TemplateCopy {
  /** The superuser password the copy answers to until it is changed. */
  readonly password: string;
}

/** Bumped when what a template holds changes (initdb's options), so older templates are not used. */
const TEMPLATE_FORMAT = 1;

/** The folder holding this build's template: one per user (the caller's) in the system temp folder. */
export async function templateFolder(binaries: ServerBinaries): Promise<string> {
  const postgres = await stat(join(binaries.bin, 'postgres'));
  const build = createHash('sha256')
    .update(`${TEMPLATE_FORMAT}\0${binaries.bin}\0${postgres.size}\0${postgres.mtimeMs}`)
    .digest('hex')
    .slice(0, 16);
  return join(tmpdir(), `shardflake-initdb-${process.getuid?.() ?? 'user'}`, build);
}

/**
 * The template, made first when there is none: initdb (through `initialise`) into a folder of its own, renamed
 * into place in one step, so two processes that make it at once both end with one whole template.
 */
async function ensureTemplate(
  binaries: ServerBinaries,
  user: ServerUser | undefined,
  initialise: (dataDir: string, password: string) => Promise<void>,
): Promise<{ data: string; password: string }> {
  const folder = await templateFolder(binaries);
  const read = async () => ({
    data: join(folder, 'data'),
    password: (await readFile(join(folder, 'password'), 'utf8')).trim(),
  });
  if (
    await stat(join(folder, 'data', 'PG_VERSION')).then(
      () => true,
      () => false,
    )
  )
    return read();
  // Enterable by the server's user (as root, `postgres` runs initdb and the copies); the data itself stays 0700.
  await mkdir(join(folder, '..'), { recursive: true, mode: 0o755 });
  const making = `${folder}.making-${process.pid}-${randomBytes(4).toString('hex')}`;
  await mkdir(making, { mode: 0o700 });
  try {
    if (user) await chown(making, user.uid, user.gid);
    const password = randomBytes(24).toString('base64url');
    await initialise(join(making, 'data'), password);
    await writeFile(join(making, 'password'), `${password}\n`, { mode: 0o600 });
    await rename(making, folder).catch((error: NodeJS.ErrnoException) => {
      // Another process put its template in place first: that one is used.
      if (error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') throw error;
    });
  } finally {
    await rm(making, { recursive: true, force: true });
  }
  return read();
}

/**
 * Fills `dataDir` (made here, empty) with a copy of the template, under a system identifier of its own. Rejects
 * when anything is not as expected; the caller then runs initdb as it would have.
 */
export async function copyTemplate(
  binaries: ServerBinaries,
  user: ServerUser | undefined,
  dataDir: string,
  initialise: (dataDir: string, password: string) => Promise<void>,
): Promise<TemplateCopy> {
  const template = await ensureTemplate(binaries, user, initialise);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  if (user) await chown(dataDir, user.uid, user.gid);
  // As the server's user, so the copy is that user's (modes and all) whoever runs this. A copy of 40 MB takes
  // ≈ 0.1 s; one that has not ended in a minute is given up, and initdb runs instead.
  await runToCompletion('/bin/cp', ['-a', `${template.data}/.`, dataDir], user, 60_000);
  await newSystemIdentifier(dataDir);
  return { password: template.password };
}

/** Gives a copied data directory a system identifier of its own (see the top of this file). */
export async function newSystemIdentifier(dataDir: string): Promise<void> {
  const controlFile = join(dataDir, 'global', 'pg_control');
  const control = await readFile(controlFile);
  const crcAt = controlCrcOffset(control);
  const old = control.subarray(0, 8);
  const segments = (await readdir(join(dataDir, 'pg_wal'))).filter((n) => /^[0-9A-F]{24}$/.test(n));
  if (segments.length === 0) throw new Error(`no WAL segment in ${dataDir}`);
  // Positive, as PostgreSQL's own are (read as a bigint): the top bit of the machine-order uint64 is 0.
  let id = randomBytes(8);
  while (id.every((b) => b === 0)) id = randomBytes(8);
  const top = endianness() === 'LE' ? 7 : 0;
  id[top] = (id[top] as number) & 0x7f;
  const handles = await Promise.all(segments.map((s) => open(join(dataDir, 'pg_wal', s), 'r+')));
  try {
    for (const [i, handle] of handles.entries()) {
      const header = Buffer.alloc(8);
      await handle.read(header, 0, 8, 24);
      if (!header.equals(old))
        throw new Error(
          `WAL segment ${segments[i]} does not carry pg_control's system identifier at byte 24`,
        );
    }
    for (const handle of handles) await handle.write(id, 0, 8, 24);
  } finally {
    await Promise.all(handles.map((h) => h.close()));
  }
  id.copy(control, 0);
  control.writeUInt32LE(crc32c.buf(control.subarray(0, crcAt)) >>> 0, crcAt);
  await writeFile(controlFile, control);
}

/** Where pg_control keeps its CRC-32C: the first 4-byte-aligned offset whose bytes are the CRC of those before. */
export function controlCrcOffset(control: Buffer): number {
  for (let at = 16; at + 4 <= Math.min(control.length, 1024); at += 4)
    if (control.readUInt32LE(at) === crc32c.buf(control.subarray(0, at)) >>> 0) return at;
  throw new Error('pg_control has no CRC-32C where one was looked for');
}

/**
 * The SCRAM-SHA-256 verifier of `password` (RFC 5802/7677, as PostgreSQL stores it), for `ALTER ROLE … PASSWORD`:
 * computed here, as psql's \password does, so the password itself never reaches the server, its logs
 * (`log_statement = ddl` logs the statement) or pg_stat_activity. Passwords made here are base64url, which
 * SASLprep leaves as they are.
 */
export function scramVerifier(password: string, salt = randomBytes(16), iterations = 4096): string {
  const salted = pbkdf2Sync(password, salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

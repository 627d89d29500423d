import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmod, chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import pg from 'pg';
import { type EmbeddedServer, freePort } from '../../packages/embedded/src/embedded.js';

/**
 * Debian's PgBouncer (`/usr/sbin/pgbouncer`, installed by the test set-up when missing) in transaction mode in
 * front of an embedded server: its own ini and userlist in a temp folder, a free port, stopped after the test
 * file. PgBouncer refuses to run as root, so as root it runs as the `postgres` user (as the servers do). Call at
 * the top level of a test file, like useServers.
 */
export interface Bouncer {
  readonly port: number;
  /** The server's URL with the bouncer's port: same user, password and database. */
  readonly url: string;
  stop(): Promise<void>;
}

export const PGBOUNCER = '/usr/sbin/pgbouncer';

export async function startPgBouncer(server: EmbeddedServer): Promise<Bouncer> {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-pgbouncer-'));
  const target = new URL(server.url);
  const port = await freePort();
  const user = decodeURIComponent(target.username);
  await writeFile(join(dir, 'userlist.txt'), `"${user}" "${decodeURIComponent(target.password)}"\n`);
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=127.0.0.1 port=${target.port}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = scram-sha-256',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      'max_client_conn = 500',
      'default_pool_size = 20',
      // node-postgres sends only parameters PgBouncer tracks; other drivers send these two
      'ignore_startup_parameters = extra_float_digits,options',
      'server_reset_query =',
      `admin_users = ${user}`,
      '',
    ].join('\n'),
  );
  const owner =
    process.getuid?.() === 0
      ? {
          uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })),
          gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })),
        }
      : undefined;
  if (owner) {
    for (const f of ['', 'userlist.txt', 'pgbouncer.ini']) await chown(join(dir, f), owner.uid, owner.gid);
  }
  await chmod(join(dir, 'userlist.txt'), 0o600);
  const log: string[] = [];
  const child: ChildProcess = spawn(PGBOUNCER, [join(dir, 'pgbouncer.ini')], {
    ...(owner ?? {}),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr?.on('data', (d: Buffer) => log.push(d.toString()));
  let exited = false;
  child.on('exit', () => {
    exited = true;
  });
  const url = `postgres://${target.username}:${target.password}@127.0.0.1:${port}${target.pathname}`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited) throw new Error(`pgbouncer exited: ${log.join('').slice(-800)}`);
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
    client.on('error', () => {});
    const ok = await client.connect().then(
      () => true,
      () => false,
    );
    await client.end().catch(() => {});
    if (ok) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`pgbouncer did not accept connections: ${log.join('').slice(-800)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  let stopped = false;
  const bouncer: Bouncer = {
    port,
    url,
    async stop() {
      if (stopped) return;
      stopped = true;
      if (!exited) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGINT');
        await gone;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
  after(() => bouncer.stop());
  return bouncer;
}

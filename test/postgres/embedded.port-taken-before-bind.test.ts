import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type Socket, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import {
  freePort,
  passwordFile,
  startEmbeddedServer,
  startOnFreePort,
} from '../../packages/embedded/src/embedded.js';
import { packagedBinaries, startServerProcess } from '../../packages/embedded/src/server-process.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';

const base = await mkdtemp(join(tmpdir(), 'shardflake-port-'));
// The server runs as the `postgres` user when the tests run as root: it must reach the folder.
await chmod(base, 0o755);
after(() => rm(base, { recursive: true, force: true }));

/**
 * A port that an outgoing connection holds, the way the kernel hands a port a server was about to bind to another
 * process's client: the local end of a loopback connection to a throwaway listener.
 */
async function portHeldByAClient(): Promise<{ port: number; release: () => void }> {
  const sockets: Socket[] = [];
  const listener = createServer((s) => sockets.push(s));
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const address = listener.address();
  const client = tcpConnect(typeof address === 'object' && address ? address.port : 0, '127.0.0.1');
  await new Promise<void>((resolve) => client.on('connect', resolve));
  return {
    port: client.localPort as number,
    release: () => {
      client.destroy();
      for (const s of sockets) s.destroy();
      listener.close();
    },
  };
}

describe('embedded server whose port is taken between choosing and binding', () => {
  it('a fixed port that a client socket holds: one SERVER_UNREACHABLE error naming the port', async () => {
    const held = await portHeldByAClient();
    try {
      await assert.rejects(
        startEmbeddedServer('a', { dir: join(base, 'fixed'), port: held.port }),
        (e: unknown) => {
          assert.ok(isShardflakeError(e, 'SERVER_UNREACHABLE'), String(e));
          assert.match(
            e.message,
            new RegExp(`could not start embedded PostgreSQL a: port ${held.port} is in use`),
          );
          return true;
        },
      );
    } finally {
      held.release();
    }
  });

  it('a chosen port taken before the server binds it: the server starts on the next port and answers', async () => {
    // Data directory made once by a normal start, so that only the start is retried below.
    const dir = join(base, 'retry');
    const first = await startEmbeddedServer('a', { dir, persistent: true });
    await first.stop();
    const password = (await readFile(passwordFile(dir, 'a'), 'utf8')).trim();

    const held = await portHeldByAClient();
    const picked: number[] = [];
    const pickPort = async () => {
      const port = picked.length === 0 ? held.port : await freePort();
      picked.push(port);
      return port;
    };
    // As root the server runs as the postgres user, who owns the data directory now.
    const user = process.getuid?.() === 0 ? await stat(join(dir, 'a')) : undefined;
    const startOn = (port: number, log: (text: string) => void) =>
      startServerProcess({
        binaries: packagedBinaries(),
        dataDir: join(dir, 'a'),
        port,
        flags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
        user: user && { uid: user.uid, gid: user.gid },
        onLog: log,
      });
    try {
      const { server, port } = await startOnFreePort(startOn, pickPort, 3);
      try {
        assert.equal(picked.length, 2, 'one retry');
        assert.equal(port, picked[1]);
        assert.notEqual(port, held.port);
        const client = await connect(`postgres://postgres:${password}@127.0.0.1:${port}/postgres`);
        const { rows } = await client.query('SELECT 1 AS one');
        await client.end();
        assert.equal(rows[0].one, 1);
      } finally {
        await server.stop();
      }
      // Out of attempts: the last reason, not a generic one.
      picked.length = 0;
      await assert.rejects(startOnFreePort(startOn, pickPort, 1), new RegExp(`port ${held.port} is in use`));
    } finally {
      held.release();
    }
  });
});

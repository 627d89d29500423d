import { createConnection, createServer, type Socket } from 'node:net';
import { after } from 'node:test';

/**
 * A TCP proxy in front of a real server, for tests of lost connections: it forwards every connection to the
 * server, and `cut()` ends every connection open through it at once, the way a network or a dying server does —
 * `'close'` closes the client's socket (node-postgres sees "Connection terminated unexpectedly"), `'reset'` sends a
 * TCP reset (ECONNRESET). New connections go through as before. Stopped after the test file.
 */
export interface CutProxy {
  /** `postgres://…` of the server, with the proxy's port. */
  readonly url: string;
  /** Connections open through the proxy now. */
  readonly open: number;
  cut(how: 'close' | 'reset'): void;
  /** While down, every new connection is closed as soon as it opens (a server that went away). */
  down: boolean;
}

export async function startCutProxy(serverUrl: string): Promise<CutProxy> {
  const target = new URL(serverUrl);
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  let down = false;
  const server = createServer((client) => {
    if (down) {
      client.destroy();
      return;
    }
    const upstream = createConnection({ host: target.hostname, port: Number(target.port) });
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  after(
    () =>
      new Promise<void>((resolve) => {
        for (const { client, upstream } of pairs) {
          client.destroy();
          upstream.destroy();
        }
        server.close(() => resolve());
      }),
  );
  const url = new URL(serverUrl);
  url.port = String(port);
  return {
    url: url.toString(),
    get open() {
      return pairs.size;
    },
    get down() {
      return down;
    },
    set down(value: boolean) {
      down = value;
    },
    cut(how) {
      for (const pair of [...pairs]) {
        pairs.delete(pair);
        if (how === 'reset') pair.client.resetAndDestroy();
        else pair.client.destroy();
        pair.upstream.destroy();
      }
    },
  };
}

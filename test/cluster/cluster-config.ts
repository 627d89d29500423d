import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { type ClusterConfig, validateConfig } from '../../packages/shardflake/src/config/config.js';

/** A small cluster config over the test's servers (the first holds the catalog). */
export function testConfig(
  servers: readonly EmbeddedServer[],
  overrides: Record<string, unknown> = {},
): ClusterConfig {
  return validateConfig(
    {
      servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
      catalog: servers[0]?.name,
      logicalShards: 16,
      epoch: '2024-01-01T00:00:00Z',
      tables: {
        photos: [
          'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
          'CREATE INDEX photos_user ON photos (user_id, id)',
        ],
      },
      ...overrides,
    },
    'test-config',
  );
}

/** `users (id, name, email)` in 4 shards over the test's servers, with the unique lookup `user_email` on email. */
export function usersWithEmailLookup(servers: readonly EmbeddedServer[]): ClusterConfig {
  return testConfig(servers, {
    logicalShards: 4,
    tables: {
      users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)',
    },
    lookups: { user_email: { table: 'users', column: 'email', unique: true } },
  });
}

import type pg from 'pg';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { type ClusterConfig, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';

/** The config file's content for a small cluster on `servers`, one `items` table. */
export function rawConfig(servers: readonly EmbeddedServer[], logicalShards = 4): Record<string, unknown> {
  return {
    servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
    catalog: 'a',
    logicalShards,
    epoch: '2024-01-01T00:00:00Z',
    tables: {
      items: [
        'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text NOT NULL, n integer, at timestamptz DEFAULT now())',
        'CREATE INDEX items_n ON items (n)',
      ],
    },
  };
}

/** A small cluster for move tests: `logicalShards` shards spread over the given servers, one `items` table. */
export async function makeCluster(
  servers: readonly EmbeddedServer[],
  logicalShards = 4,
): Promise<ClusterConfig> {
  const config = validateConfig(rawConfig(servers, logicalShards), 'test config');
  await initCluster(config);
  return config;
}

export async function withClient<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = await connect(url);
  try {
    return await work(c);
  } finally {
    await c.end();
  }
}

export async function placement(
  config: ClusterConfig,
  shard: number,
): Promise<{ server: string; state: string }> {
  return withClient(config.servers[config.catalog] as string, async (c) => {
    const { rows } = await c.query('SELECT server, state FROM shardflake.shards WHERE shard = $1', [shard]);
    return rows[0] as { server: string; state: string };
  });
}

/** What a move may leave on a server: slots, publications, subscriptions, its DDL guard. */
export async function replicationLeftovers(url: string): Promise<string[]> {
  return withClient(url, async (c) => {
    const { rows } = await c.query(
      `SELECT 'slot ' || slot_name AS o FROM pg_replication_slots
       UNION ALL SELECT 'publication ' || pubname FROM pg_publication
       UNION ALL SELECT 'subscription ' || subname FROM pg_subscription
       UNION ALL SELECT 'event trigger ' || evtname FROM pg_event_trigger WHERE evtname LIKE 'shardflake_move%'`,
    );
    return rows.map((r: { o: string }) => r.o);
  });
}

export async function countRows(url: string, schema: string): Promise<number> {
  return withClient(url, async (c) => {
    const { rows } = await c.query(`SELECT count(*)::int AS n FROM "${schema}".items`);
    return (rows[0] as { n: number }).n;
  });
}

export async function schemaOn(url: string, schema: string): Promise<boolean> {
  return withClient(url, async (c) => {
    const { rows } = await c.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    return rows.length > 0;
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

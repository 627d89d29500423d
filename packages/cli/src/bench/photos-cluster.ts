import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import type pg from 'pg';
import { type InitResult, initCluster } from 'shardflake/internal/admin/init.js';
import { readShardMap, type ShardMap } from 'shardflake/internal/catalog/shards.js';
import { type ClusterConfig, validateConfig } from 'shardflake/internal/config/config.js';
import { connect, createPool } from 'shardflake/internal/postgres/connect.js';

/**
 * The cluster `bench app` and `bench cluster` measure: two embedded servers (a holds the catalog), `shards`
 * logical shards with one `photos` table, and for the baseline side one `pg` pool per server and the shard map
 * (the direct side knows where each shard is, as a hand-written app would).
 */
export interface PhotosCluster {
  servers: EmbeddedServer[];
  config: ClusterConfig;
  init: InitResult;
  map: ShardMap;
  /** Baseline pools by server name. */
  pools: Map<string, pg.Pool>;
  /** Ends the pools and stops the servers. */
  stop: () => Promise<void>;
}

export async function startPhotosCluster(options: {
  shards: number;
  concurrency: number;
  batchSize?: number;
  onProgress: (step: 'init', done: number, total: number) => void;
}): Promise<PhotosCluster> {
  const servers = await startEmbeddedServers(2);
  const pools = new Map<string, pg.Pool>();
  const stop = async () => {
    await Promise.all([...pools.values()].map((p) => p.end()));
    await Promise.all(servers.map((s) => s.stop()));
  };
  try {
    const config = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: options.shards,
        tables: {
          photos: [
            'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
            'CREATE INDEX photos_user ON photos (user_id, id)',
          ],
        },
      },
      'bench config',
    );
    const init = await initCluster(config, {
      ...(options.batchSize ? { batchSize: options.batchSize } : {}),
      onProgress: (done, total) => options.onProgress('init', done, total),
    });
    const catalog = await connect(servers[0]?.url as string);
    const map = await readShardMap(catalog).finally(() => catalog.end());
    for (const s of servers) {
      pools.set(s.name, createPool(s.url, { max: options.concurrency, applicationName: 'bench direct' }));
    }
    return { servers, config, init, map, pools, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

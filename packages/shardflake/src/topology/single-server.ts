import { checkout, createPool, describeUrl } from '../postgres/connect.js';
import type { AcquireOptions, ServerNodes, ServerNodesOptions } from './nodes.js';
import { DEFAULT_SHARDS_PER_CONNECTION, WarmShards } from './warm-shards.js';

const ignore = () => {};

/** A server of one node: every lease is on it and it is always the primary (no role check, no position round trips). */
export function createSingleServerNodes(
  name: string,
  url: string,
  options: ServerNodesOptions = {},
): ServerNodes {
  const pool = createPool(url, {
    max: options.poolSize ?? 10,
    connectTimeoutMs: options.connectTimeoutMs,
    applicationName: options.applicationName ?? 'shardflake router',
    maxUses: options.maxUses,
    maxLifetimeSeconds: options.maxLifetimeSeconds,
  });
  const node = describeUrl(url);
  const warm = new WarmShards(options.shardsPerConnection ?? DEFAULT_SHARDS_PER_CONNECTION);
  return {
    name,
    hasReplicas: false,
    async acquire(options: AcquireOptions) {
      const started = performance.now();
      warm.prefer(pool, options);
      const client = await checkout(pool);
      const waitMs = performance.now() - started;
      // The pool listens for errors only on idle clients; a leased one whose server goes away between two
      // queries would emit 'error' with nobody listening and crash the application.
      client.on('error', ignore);
      return {
        client,
        node,
        role: 'primary',
        waitMs,
        touch: (shards) => warm.touch(client, shards),
        release: (error?: unknown) => {
          client.removeListener('error', ignore);
          client.release(error instanceof Error ? error : error !== undefined || warm.spent(client));
        },
      };
    },
    positionAfterWrite: async () => undefined,
    noteError: () => false,
    end: () => pool.end(),
  };
}

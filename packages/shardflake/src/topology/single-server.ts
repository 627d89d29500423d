import { checkout, createPool, describeUrl } from '../postgres/connect.js';
import type { ServerNodes, ServerNodesOptions } from './nodes.js';

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
  return {
    name,
    hasReplicas: false,
    async acquire() {
      const started = performance.now();
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
        release: (error?: unknown) => {
          client.removeListener('error', ignore);
          client.release(error instanceof Error ? error : error !== undefined);
        },
      };
    },
    positionAfterWrite: async () => undefined,
    noteError: () => false,
    end: () => pool.end(),
  };
}

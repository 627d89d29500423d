import { ShardflakeError } from '../errors/errors.js';
import type { ServerNodes, ServerNodesOptions } from './nodes.js';
import { createReplicatedServerNodes } from './replicated-server.js';
import { createSingleServerNodes } from './single-server.js';

/**
 * The nodes of a configured server: one node (single-server.ts), or a primary and its streaming replicas, roles
 * found at run time (replicated-server.ts).
 */
export function createServerNodes(
  name: string,
  urls: readonly string[],
  options: ServerNodesOptions = {},
): ServerNodes {
  if (urls.length > 1) return createReplicatedServerNodes(name, urls, options);
  const url = urls[0];
  if (!url) throw new ShardflakeError('INVALID_CONFIG', `server ${name} has no node URL`);
  return createSingleServerNodes(name, url, options);
}

import { readFile } from 'node:fs/promises';
import { startEmbeddedServers } from '@shardflake/embedded';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { createRouter } from 'shardflake/internal/router/router.js';

/**
 * `bench app --memory`: how much a pooled connection's backend grows when it visits every shard of its server,
 * with and without connection recycling. Every backend keeps the catalog entries (relcache, catcache, plans) of
 * every table it has touched; with thousands of schemas per server, a long-lived connection holds thousands of
 * tables' worth. Recycling (`maxUses`) caps that at the tables one connection visits before it is replaced.
 *
 * One server, `shards` logical shards, a router with a pool of one connection; each shard gets a session that
 * inserts a row and counts the table's rows. Then, on that same connection, the backend's memory: the sum of
 * `pg_backend_memory_contexts` (and its CacheMemoryContext part) and the process's VmRSS from /proc.
 */
export interface BackendMemoryOptions {
  shards?: number;
  /** Recycling setting of the second sweep (default 500 checkouts). */
  maxUses?: number;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface BackendMemorySweep {
  maxUses: number;
  seconds: number;
  contextsBytes: number;
  cacheBytes: number;
  rssKb: number | null;
}

export interface BackendMemoryResult {
  shards: number;
  fresh: BackendMemorySweep;
  sweeps: BackendMemorySweep[];
}

async function rssKb(pid: number): Promise<number | null> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const match = /VmRSS:\s+(\d+)\s+kB/.exec(status);
  return match ? Number(match[1]) : null;
}

export async function runBackendMemoryBench(
  options: BackendMemoryOptions = {},
): Promise<BackendMemoryResult> {
  const shards = options.shards ?? 8192;
  const progress = options.onProgress ?? (() => {});
  const [server] = await startEmbeddedServers(1);
  if (!server) throw new Error('no server started');
  try {
    const config = validateConfig(
      {
        servers: { a: server.url },
        catalog: 'a',
        logicalShards: shards,
        tables: {
          photos: [
            'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
            'CREATE INDEX photos_user ON photos (user_id, id)',
          ],
        },
      },
      'memory bench config',
    );
    await initCluster(config, { onProgress: (d, n) => progress('init', d, n) });
    const measure = async (maxUses: number, sweep: boolean): Promise<BackendMemorySweep> => {
      // No bound on the shards a connection serves (shardsPerConnection), so that maxUses alone decides.
      const router = await createRouter(config, { poolSize: 1, maxUses, shardsPerConnection: 0 });
      try {
        const started = performance.now();
        if (sweep) {
          for (let shard = 0; shard < shards; shard++) {
            await router.withShard({ shard }, async (s) => {
              await s.query('INSERT INTO photos (user_id, caption) VALUES ($1, $2) RETURNING id', [
                shard,
                'sweep',
              ]);
              await s.query('SELECT count(*) FROM photos WHERE user_id = $1', [shard]);
            });
            if (shard % 256 === 255) progress(`sweep maxUses=${maxUses}`, shard + 1, shards);
          }
        }
        const seconds = (performance.now() - started) / 1000;
        // The measurement runs on the pool's one connection: the backend that did the sweep (or its successor).
        const row = await router.withShard({ shard: 0 }, async (s) => {
          // Context ids are transient: read the view once, then find CacheMemoryContext's subtree by its id.
          const { rows } = await s.query<{ pid: number; total: string; cache: string }>(
            `WITH c AS MATERIALIZED (SELECT name, path, total_bytes FROM pg_backend_memory_contexts),
                  cache AS (SELECT path[array_length(path, 1)] AS id FROM c WHERE name = 'CacheMemoryContext')
             SELECT pg_backend_pid() AS pid, sum(total_bytes)::text AS total,
                    sum(total_bytes) FILTER (WHERE (SELECT id FROM cache) = ANY (path))::text AS cache
             FROM c`,
          );
          return rows[0] as { pid: number; total: string; cache: string };
        });
        return {
          maxUses,
          seconds: Number(seconds.toFixed(1)),
          contextsBytes: Number(row.total),
          cacheBytes: Number(row.cache),
          rssKb: await rssKb(row.pid),
        };
      } finally {
        await router.close();
      }
    };
    const fresh = await measure(0, false);
    const sweeps = [await measure(0, true), await measure(options.maxUses ?? 500, true)];
    return { shards, fresh, sweeps };
  } finally {
    await server.stop();
  }
}

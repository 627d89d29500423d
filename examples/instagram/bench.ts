import { startEmbeddedServers } from '@shardflake/embedded';
import { createRouter, initCluster, validateConfig } from 'shardflake';
import { InstagramApp } from './app.js';
import { TABLES } from './schema.js';
import { runWorkload } from './workload.js';

/** The example's workload on its own two embedded servers, for `shardflake bench app`: requests/s, p50, p99. */
export async function runExampleWorkload(
  options: { shards?: number; requests?: number; workers?: number } = {},
): Promise<{ requests: number; perSecond: number; p50Ms: number; p99Ms: number }> {
  const servers = await startEmbeddedServers(2);
  try {
    const config = validateConfig(
      {
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: options.shards ?? 64,
        tables: TABLES,
      },
      'example bench config',
    );
    await initCluster(config);
    const router = await createRouter(config, { poolSize: options.workers ?? 16 });
    try {
      const app = new InstagramApp(router);
      const requests = options.requests ?? 4000;
      const result = await runWorkload(app, { users: 200, requests, workers: options.workers ?? 16 });
      if (result.errors.length > 0) throw result.errors[0];
      const sorted = [...result.latenciesMs].sort((a, b) => a - b);
      const at = (p: number) =>
        Number((sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0).toFixed(2));
      return {
        requests: result.requests,
        perSecond: result.requests / result.seconds,
        p50Ms: at(0.5),
        p99Ms: at(0.99),
      };
    } finally {
      await router.close();
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

import type { ClusterConfig } from 'shardflake/internal/config/config.js';
import { createRouter, type RouterOptions } from 'shardflake/internal/router/router.js';
import { HUNG_MS } from './faults-cross.js';

/**
 * The application's side of a fault scenario (bench faults): one router writer per shard inserting one row at a
 * time, each row carrying a token of its own (`w<shard>-<n>`), and a log of every insert the router acknowledged
 * (its id and token). An insert that failed is not acknowledged: if it committed anyway (a connection lost after
 * the commit), its row is found but owed to no one, so it is neither lost nor duplicated.
 */
export interface AcknowledgedInsert {
  shard: number;
  id: bigint;
  token: string;
  /** performance.now() when the router acknowledged it. */
  at: number;
}

export interface WriterLog {
  acknowledged: AcknowledgedInsert[];
  /** Inserts that failed (not acknowledged), by error code. */
  failed: Record<string, number>;
  /** Tokens of the inserts still running HUNG_MS after stop() (faults-cross.ts). */
  hung: string[];
}

export interface Writers {
  /** Stops the writers (each finishes its insert in flight) and returns the log. */
  stop(): Promise<WriterLog>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts one writer per shard through a router made from `config` (the application's, maybe older, config).
 * `name` tells this set's tokens from another's (an application redeployed mid-scenario).
 */
export async function startWriters(
  name: string,
  config: ClusterConfig,
  shards: readonly number[],
  options: RouterOptions = {},
): Promise<Writers> {
  const router = await createRouter(config, { telemetry: false, ...options });
  const log: WriterLog = { acknowledged: [], failed: {}, hung: [] };
  let stopping = false;
  const inFlight = new Map<number, string>();
  const loops = shards.map(async (shard) => {
    for (let n = 0; !stopping; n++) {
      const token = `w${name}.${shard}-${n}`;
      inFlight.set(shard, token);
      try {
        const id = await router.insert('items', { note: token }, { shard });
        log.acknowledged.push({ shard, id, token, at: performance.now() });
      } catch (error) {
        const code = (error as { code?: string }).code ?? 'ERROR';
        log.failed[code] = (log.failed[code] ?? 0) + 1;
        await sleep(20);
      } finally {
        inFlight.delete(shard);
      }
    }
  });
  return {
    async stop() {
      stopping = true;
      // Bounded: an insert that never returns is counted as hung, not waited for.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(loops),
        new Promise((r) => {
          timer = setTimeout(r, HUNG_MS);
        }),
      ]);
      clearTimeout(timer);
      log.hung = [...inFlight.values()];
      await router.close();
      return log;
    },
  };
}

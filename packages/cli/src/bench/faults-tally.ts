import { readShardMap } from 'shardflake/internal/catalog/shards.js';
import type { ClusterConfig } from 'shardflake/internal/config/config.js';
import { qualified } from 'shardflake/internal/postgres/identifier.js';
import { connectServer } from 'shardflake/internal/topology/connections.js';
import type { AcknowledgedInsert } from './faults-writers.js';

/**
 * The end of a fault scenario (bench faults): every acknowledged insert looked up in its shard's home, the copy
 * the catalog places the shard on once the scenario is over (after `cluster cleanup`). A row anywhere else — a
 * kept leftover copy, a node the catalog no longer names — is lost to the application, so it counts as lost.
 *
 * - lost: acknowledged inserts whose id is not in the home copy, or is there with another token;
 * - duplicated: tokens held by more than one row of the home copies (an insert applied twice, e.g. retried after
 *   it had committed), and ids of acknowledged inserts found in two shards' homes.
 */
export interface Tally {
  acknowledged: number;
  lost: number;
  duplicated: number;
  /** A few of the lost inserts, for the report. */
  lostExamples: string[];
}

export async function tallyAcknowledged(
  config: ClusterConfig,
  acknowledged: readonly AcknowledgedInsert[],
): Promise<Tally> {
  const catalog = await connectServer(config, config.catalog);
  const map = await readShardMap(catalog).finally(() => catalog.end());
  const shards = [...new Set(acknowledged.map((a) => a.shard))];
  const tokenById = new Map<string, string>();
  const rowsByToken = new Map<string, number>();
  const byServer = new Map<string, number[]>();
  for (const shard of shards) {
    const home = map.shards.find((s) => s.shard === shard);
    if (!home) continue;
    byServer.set(home.server, [...(byServer.get(home.server) ?? []), shard]);
  }
  let duplicated = 0;
  for (const [server, onIt] of byServer) {
    const client = await connectServer(config, server);
    try {
      for (const shard of onIt) {
        const schema = map.shards.find((s) => s.shard === shard)?.schema as string;
        const { rows } = await client.query(
          `SELECT id::text AS id, note FROM ${qualified(schema, 'items')} WHERE note LIKE 'w%'`,
        );
        for (const r of rows as { id: string; note: string }[]) {
          if (tokenById.has(r.id)) duplicated++;
          tokenById.set(r.id, r.note);
          rowsByToken.set(r.note, (rowsByToken.get(r.note) ?? 0) + 1);
        }
      }
    } finally {
      await client.end();
    }
  }
  for (const n of rowsByToken.values()) if (n > 1) duplicated += n - 1;
  const lost = acknowledged.filter((a) => tokenById.get(a.id.toString()) !== a.token);
  return {
    acknowledged: acknowledged.length,
    lost: lost.length,
    duplicated,
    lostExamples: lost.slice(0, 5).map((a) => `shard ${a.shard} id ${a.id} (${a.token})`),
  };
}

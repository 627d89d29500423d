import { readOldIdsBelow, readShardMap } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import type { Problem } from '../config/verify-check.js';
import {
  type CheckedTable,
  carriesRule,
  checkedTablesSql,
  ID_CHECK_CONSTRAINT,
  idShardRule,
} from '../postgres/id-shard-rule.js';
import { quoteIdent } from '../postgres/identifier.js';
import type { VerifyServers } from './migrations-verify.js';

/**
 * The `cluster verify` check of the id rule (postgres/id-shard-rule.ts): rows whose id names another shard than the
 * one that holds them, which get, update, delete and lookups look for in the other shard and never find. A table
 * that carries the rule validated holds none (PostgreSQL checked every row), so only the others are scanned: a
 * table of a cluster made before the rule, or one whose rows broke it when `cluster migrate` added it (it stays
 * NOT VALID). A table without the rule is reported too: its writes are not checked until `cluster migrate` runs.
 */
const EXAMPLES = 3;

export const idsCheck = {
  name: 'ids',
  async run(config: ClusterConfig, pools: VerifyServers): Promise<Problem[]> {
    const { map, oldIdsBelow } = await pools.use(config.catalog, async (catalog) => ({
      map: await readShardMap(catalog),
      oldIdsBelow: await readOldIdsBelow(catalog),
    }));
    const rule = idShardRule(config.layout, oldIdsBelow);
    const problems: Problem[] = [];
    const servers = [...new Set(map.shards.map((s) => s.server))].filter((s) => s in config.servers);
    for (const server of servers) {
      const here = map.shards.filter((s) => s.server === server);
      const shardOf = new Map(here.map((s) => [s.schema, s.shard]));
      await pools.use(server, async (client) => {
        const { rows } = await client.query(checkedTablesSql('$1::text[]'), [here.map((s) => s.schema)]);
        for (const table of rows as CheckedTable[]) {
          const shard = shardOf.get(table.schema) as number;
          if (carriesRule(table, rule, shard)) continue;
          const where = `shard ${shard} (server ${server}) table ${table.name}`;
          const found = await client.query(
            `SELECT id FROM ${quoteIdent(table.schema, 'schema')}.${quoteIdent(table.name, 'table')}
              WHERE NOT (${rule.checkSql(shard)}) ORDER BY id LIMIT ${EXAMPLES + 1}`,
          );
          const ids = (found.rows as { id: bigint }[]).map((r) => BigInt(r.id));
          if (ids.length > 0) {
            const count =
              ids.length > EXAMPLES
                ? `more than ${EXAMPLES} rows`
                : `${ids.length} row${ids.length === 1 ? '' : 's'}`;
            const examples = ids
              .slice(0, EXAMPLES)
              .map((id) => `id ${id} names shard ${rule.shardOf(id)}`)
              .join(', ');
            problems.push({
              check: 'ids',
              where,
              what: `${count} whose id names another shard (${examples}): get, update, delete and lookups look for them there and do not find them; write each row again in the shard its id names, or with an id from this shard's next_id() (docs/lookups.md)`,
            });
          }
          if (table.valid === null)
            problems.push({
              check: 'ids',
              where,
              what: `writes are not checked for ids of other shards (no constraint ${ID_CHECK_CONSTRAINT}); run cluster migrate`,
            });
        }
      });
    }
    return problems;
  },
};

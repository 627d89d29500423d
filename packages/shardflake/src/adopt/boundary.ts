import type pg from 'pg';
import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { idRange } from '../ids/codec.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import type { AdoptModel } from './model.js';

/**
 * The boundary between old ids and new ones. Rows keep the ids the source gave them; the cluster's ids carry a time
 * field, so every id any shard makes from now on is at least the first id of this millisecond. That id is
 * `oldIdsBelow`: recorded in the catalog, every id below it is an old id (found by the root's id rule or an old-id
 * entry, routing/old-ids.ts), every id the cluster makes is above it. The source keeps handing out ids until the
 * cutover, so its ids must stay far below: the highest id it has now, doubled, plus a million, must be below the
 * boundary, or the run is refused naming the epoch that would do.
 */
export async function oldIdsBoundary(
  config: ClusterConfig,
  model: AdoptModel,
  source: pg.ClientBase,
  now = Date.now(),
): Promise<bigint> {
  const parts: string[] = [];
  for (const t of model.tables.values()) {
    if (t.kind !== 'sharded' || t.key.length !== 1) continue;
    parts.push(
      `SELECT max(${quoteIdent(t.key[0] as string)})::numeric AS m FROM ${qualified(model.adopt.schema, t.name)}`,
    );
  }
  parts.push(
    `SELECT max(coalesce(last_value, 0))::numeric AS m FROM pg_sequences WHERE schemaname = ${`'${model.adopt.schema.replace(/'/g, "''")}'`}`,
  );
  const { rows } = await source.query(
    `SELECT coalesce(max(m), 0)::text AS m FROM (${parts.join(' UNION ALL ')}) x`,
  );
  const highest = BigInt((rows[0] as { m: string }).m.split('.')[0] as string);
  const boundary = idRange(now, now, config.layout).min;
  const needed = highest * 2n + 1_000_000n;
  if (needed >= boundary) {
    const shift = BigInt(config.layout.time.shift);
    const unitMs = config.layout.timeUnitMs;
    const ms = Number((needed >> shift) + 1n) * unitMs;
    const epoch = new Date(now - ms - 86_400_000);
    throw new ShardflakeError(
      'ADOPT_REFUSED',
      `the source's ids reach ${highest}, and with epoch ${new Date(config.epoch).toISOString()} the cluster's first ids (${boundary}) would not stay above the ids the source may still hand out; set "epoch" to ${epoch.toISOString().slice(0, 10)} or earlier in the config`,
    );
  }
  return boundary;
}

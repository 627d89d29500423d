import type pg from 'pg';
import { isShardflakeError, ShardflakeError } from '../../errors.js';
import type { Layout } from '../../ids/layout.js';
import { wrapPgError } from '../../postgres/connect.js';
import { qualified, quoteIdent } from '../../postgres/identifier.js';
import {
  installLookupCatalog,
  LOOKUP_PHASES,
  type LookupPhase,
  readBuildProgress,
  recordBuildProgress,
  recordLookup,
  setLookupPhase,
} from '../catalog/lookups.js';
import { readShardMap, type ShardMap, type ShardPlacement } from '../catalog/shards.js';
import type { ClusterConfig } from '../config.js';
import { closeAll, connectAll } from '../connections.js';
import { shardForKey } from '../shard-key.js';
import { lockShard, unlockShard } from '../shard-lock.js';
import type { LookupDefinition } from './config.js';
import { captureSql, entryTable, shardEntryTablesSql } from './ddl.js';

/**
 * Building a lookup for a table that already has rows (`cluster migrate`), in phases recorded in the catalog so a
 * killed build resumes where it stopped:
 *
 *  1. `tables`: the change table and the entry table in every shard (no trigger yet: a captured change may
 *     target any shard's entry table, so all of them must exist before the first trigger).
 *  2. `capture`: the capture triggers in every shard. From here every committed write keeps its entries
 *     (maintain.ts): writes during the build are kept ("written first").
 *  3. `backfill`: every shard's rows in id order, in batches. A batch reads its rows `FOR SHARE` in the row's
 *     shard, writes their entries (`ON CONFLICT DO NOTHING`: a live write may have written one already) in
 *     one transaction per entry server, commits those, and only then ends the row transaction. The shared row
 *     locks keep every row of the batch unchanged from the read until its entries are committed, so a concurrent
 *     update or delete either committed before the read (the batch sees its result) or runs after the entries
 *     exist (and its own session removes or replaces them): the build never writes an entry for a value the row
 *     no longer holds. The batch's last id is recorded after it commits; a rerun repeats at most one batch per
 *     shard, harmlessly. A unique lookup's batch that meets an entry of another id for one of its values has found
 *     two rows with one value: the shard's progress stops there (a rerun starts again from that batch), the scan
 *     goes on to find every pair, and the build fails listing them (ids and shards, never the value).
 *  4. `ready`: routers may read the lookup ("readable once built").
 *
 * A shard's step (its tables, its triggers, the scan of its rows) runs under the shard's move lock (shard-lock.ts),
 * with the shard's placement read again under it: a build and a move of the same shard exclude each other, so a
 * move never copies a schema whose lookup tables or triggers are half made, and a build never works on a copy a
 * finished move left behind. A shard being moved stops the build with SHARD_BUSY; a rerun resumes it.
 */
export interface LookupBuildOptions {
  /** Rows per batch (default 1000). */
  batchSize?: number;
  /** Called after every batch with the lookup's shards done so far. */
  onProgress?: (lookup: string, done: number, total: number) => void;
  signal?: AbortSignal;
}

export interface LookupDuplicate {
  lookup: string;
  /** The row that already owns the value, and the one the build could not add. */
  owner: { id: bigint; shard: number };
  other: { id: bigint; shard: number };
}

export interface LookupBuildReport {
  lookup: string;
  /** Already built before this run. */
  alreadyBuilt: boolean;
  entriesWritten: number;
  durationMs: number;
}

export async function buildLookups(
  config: ClusterConfig,
  options: LookupBuildOptions = {},
): Promise<LookupBuildReport[]> {
  const lookups = config.lookups ?? [];
  if (lookups.length === 0) return [];
  const batchSize = options.batchSize ?? 1000;
  const clients = await connectAll(config, { applicationName: 'shardflake lookup build' });
  try {
    const catalog = clients.get(config.catalog) as pg.Client;
    await installLookupCatalog(catalog);
    const map = await readShardMap(catalog);
    const reports: LookupBuildReport[] = [];
    const duplicates: LookupDuplicate[] = [];
    for (const lookup of lookups) {
      const started = performance.now();
      const record = await recordLookup(catalog, lookup, 'tables');
      if (record.table !== lookup.table || record.column !== lookup.column || record.unique !== lookup.unique)
        throw new ShardflakeError(
          'INVALID_CONFIG',
          `${config.source}: lookup ${lookup.name} was built for ${record.table}.${record.column}${record.unique ? ' (unique)' : ''}; a changed lookup needs a new name`,
        );
      if (record.phase === 'ready') {
        reports.push({ lookup: lookup.name, alreadyBuilt: true, entriesWritten: 0, durationMs: 0 });
        continue;
      }
      const at = (phase: LookupPhase) => LOOKUP_PHASES.indexOf(record.phase) <= LOOKUP_PHASES.indexOf(phase);
      const eachShard = async (sql: (schema: string) => string[]) => {
        for (const s of map.shards) {
          options.signal?.throwIfAborted();
          await withShardLocked(catalog, lookup, s.shard, async (current) => {
            const placement = current.shards[s.shard] as ShardPlacement;
            await inTransaction(
              clients.get(placement.server) as pg.Client,
              sql(placement.schema).join(';\n'),
            );
          });
        }
      };
      if (at('tables')) {
        await eachShard((schema) => shardEntryTablesSql(schema, lookup));
        await setLookupPhase(catalog, lookup.name, 'capture');
      }
      if (at('capture')) {
        await eachShard((schema) => captureSql(schema, lookup));
        await setLookupPhase(catalog, lookup.name, 'backfill');
      }
      const progress = await readBuildProgress(catalog, lookup.name);
      let done = [...progress.values()].filter((p) => p.done).length;
      let written = 0;
      const found: LookupDuplicate[] = [];
      options.onProgress?.(lookup.name, done, map.shards.length);
      for (const { shard } of map.shards) {
        const state = progress.get(shard);
        if (state?.done) continue;
        let lastId = state?.lastId ?? null;
        // After a duplicate the shard's scan goes on (to list every pair) but its progress stays before it.
        let frozen = false;
        await withShardLocked(catalog, lookup, shard, async (current) => {
          const source = current.shards[shard] as ShardPlacement;
          for (;;) {
            options.signal?.throwIfAborted();
            const batch = await backfillBatch(
              clients,
              current.shards,
              lookup,
              source,
              lastId,
              batchSize,
              config.layout,
            );
            written += batch.written;
            if (batch.duplicates.length > 0) {
              found.push(...batch.duplicates);
              frozen = true;
            }
            lastId = batch.lastId ?? lastId;
            if (!frozen) await recordBuildProgress(catalog, lookup.name, source.shard, lastId, batch.last);
            if (batch.last && !frozen) done++;
            options.onProgress?.(lookup.name, done, map.shards.length);
            if (batch.last) break;
          }
        });
      }
      if (found.length > 0) {
        duplicates.push(...found);
        continue;
      }
      await setLookupPhase(catalog, lookup.name, 'ready');
      reports.push({
        lookup: lookup.name,
        alreadyBuilt: false,
        entriesWritten: written,
        durationMs: performance.now() - started,
      });
    }
    if (duplicates.length > 0) throw duplicatesError(duplicates);
    return reports;
  } finally {
    await closeAll(clients);
  }
}

/**
 * Runs `fn` holding the shard's move lock, with the cluster's map read under it (so the shard's placement is
 * current: no move of it runs while the lock is held). A shard locked by a move stops the build with SHARD_BUSY.
 */
async function withShardLocked(
  catalog: pg.Client,
  lookup: LookupDefinition,
  shard: number,
  fn: (map: ShardMap) => Promise<void>,
): Promise<void> {
  try {
    await lockShard(catalog, shard);
  } catch (error) {
    if (!isShardflakeError(error, 'SHARD_BUSY')) throw error;
    throw new ShardflakeError(
      'SHARD_BUSY',
      `building lookup ${lookup.name} stopped at shard ${shard}: ${error.message}; run cluster migrate again afterwards (the build resumes where it stopped)`,
      { cause: error },
    );
  }
  try {
    await fn(await readShardMap(catalog));
  } finally {
    await unlockShard(catalog, shard);
  }
}

function duplicatesError(duplicates: readonly LookupDuplicate[]): ShardflakeError {
  const where = (d: LookupDuplicate) =>
    `${d.lookup}: row ${d.owner.id} (shard ${d.owner.shard}) and row ${d.other.id} (shard ${d.other.shard})`;
  const shown = duplicates.slice(0, 5).map(where).join('; ');
  const more = duplicates.length > 5 ? ` and ${duplicates.length - 5} more (see detail)` : '';
  return new ShardflakeError(
    'MIGRATION_FAILED',
    `a unique lookup cannot be built: ${duplicates.length} pairs of rows hold the same value (${shown}${more}); change or delete one row of each pair through the router and run cluster migrate again`,
    { detail: duplicates.map(where).join('\n') },
  );
}

async function inTransaction(client: pg.Client, sql: string): Promise<void> {
  try {
    await client.query(`BEGIN;\n${sql};\nCOMMIT`);
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw wrapPgError(error);
  }
}

/** Step 3 for one batch of one shard (see the top of the file for why the row locks make it safe). */
async function backfillBatch(
  clients: Map<string, pg.Client>,
  shards: readonly ShardPlacement[],
  lookup: LookupDefinition,
  source: ShardPlacement,
  after: bigint | null,
  batchSize: number,
  layout: Layout,
): Promise<{ lastId: bigint | null; last: boolean; written: number; duplicates: LookupDuplicate[] }> {
  const rowClient = clients.get(source.server) as pg.Client;
  const column = quoteIdent(lookup.column, 'column');
  const table = qualified(source.schema, lookup.table);
  const entryClients = new Set<pg.Client>();
  try {
    await rowClient.query('BEGIN');
    const { rows } = await rowClient.query(
      `SELECT id, ${column}::text AS value FROM ${table} WHERE id > $1 ORDER BY id LIMIT $2 FOR SHARE`,
      [after ?? -(2n ** 63n), batchSize],
    );
    const read = rows as { id: string | bigint; value: string | null }[];
    // Entries grouped by entry shard, each shard's group written by its server's client.
    const byShard = new Map<number, { value: string; id: bigint }[]>();
    for (const r of read) {
      if (r.value === null) continue;
      const shard = shardForKey(r.value, shards.length);
      const list = byShard.get(shard) ?? [];
      list.push({ value: r.value, id: BigInt(r.id) });
      byShard.set(shard, list);
    }
    let written = 0;
    const duplicates: LookupDuplicate[] = [];
    for (const shard of [...byShard.keys()].sort((a, b) => a - b)) {
      const placement = shards[shard] as ShardPlacement;
      const client = clients.get(placement.server) as pg.Client;
      // The row shard's server shares the row transaction's client: its entries ride in that transaction.
      if (client !== rowClient && !entryClients.has(client)) {
        await client.query('BEGIN');
        entryClients.add(client);
      }
      const list = byShard.get(shard) as { value: string; id: bigint }[];
      const entries = qualified(placement.schema, entryTable(lookup.name));
      const values = [list.map((e) => e.value), list.map((e) => e.id)];
      const inserted = await client.query(
        `INSERT INTO ${entries} (value, id) SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT DO NOTHING RETURNING id`,
        values,
      );
      written += inserted.rowCount ?? 0;
      if (!lookup.unique || inserted.rowCount === list.length) continue;
      const clash = await client.query(
        `SELECT e.id AS owner, g.id AS other FROM ${entries} e
           JOIN unnest($1::text[], $2::bigint[]) AS g(value, id) ON e.value = g.value AND e.id <> g.id`,
        values,
      );
      for (const c of clash.rows as { owner: string; other: string }[]) {
        const owner = BigInt(c.owner);
        const other = BigInt(c.other);
        duplicates.push({
          lookup: lookup.name,
          owner: { id: owner, shard: shardOfIdFor(layout, owner) },
          other: { id: other, shard: source.shard },
        });
      }
    }
    // Entries first, then the row locks go: see the top of the file.
    for (const client of entryClients) await client.query('COMMIT');
    entryClients.clear();
    await rowClient.query('COMMIT');
    const lastRow = read[read.length - 1];
    return {
      lastId: lastRow ? BigInt(lastRow.id) : null,
      last: read.length < batchSize,
      written,
      duplicates,
    };
  } catch (error) {
    for (const client of entryClients) await client.query('ROLLBACK').catch(() => {});
    await rowClient.query('ROLLBACK').catch(() => {});
    throw wrapPgError(error);
  }
}

/** The logical shard an id was made in (the layout's shard field). */
export function shardOfIdFor(layout: Layout, id: bigint): number {
  const field = layout.fields.find((f) => f.kind === 'shard');
  if (!field) throw new ShardflakeError('INVALID_LAYOUT', `layout ${layout.name} has no shard field`);
  return Number((id >> BigInt(field.shift)) & field.max);
}

import type pg from 'pg';
import {
  installLookupCatalog,
  LOOKUP_PHASES,
  type LookupPhase,
  readBuildProgress,
  recordBuildProgress,
  recordLookup,
  setDirectInsert,
  setLookupPhase,
  setOwnerIndex,
} from '../catalog/lookups.js';
import { readPlacement, readShardMap, type ShardPlacement } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import type { LookupDefinition } from '../config/lookups.js';
import { ShardflakeError, sqlStateOf } from '../errors/errors.js';
import { FENCED_SQLSTATE } from '../fence/fence.js';
import { lockShardWaiting, unlockShard } from '../fence/shard-lock.js';
import type { Layout } from '../ids/layout.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { shardForKey } from '../routing/shard-key.js';
import { closeAll, connectAll, connectServer } from '../topology/connections.js';
import {
  captureFunctionSql,
  captureSql,
  describeLookup,
  entryTable,
  lookupValueSql,
  ownerIndexSql,
  sameDefinition,
  shardEntryTablesSql,
} from './ddl.js';

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
 *  5. The owner index of a unique lookup (ddl.ts) in every shard, then `owner_index` in the catalog: from then on
 *     routers may answer from their owner cache (owner-cache.ts). A lookup built before the index existed gets it
 *     here, from any later migrate. Each shard's `CREATE INDEX` holds the shard's lock and makes writes to that
 *     shard's table wait while it builds (a shard's share of the table: small when shards are many).
 *  6. The capture function of this version in every shard (CREATE OR REPLACE: the triggers stay), then
 *     `direct_insert` in the catalog: from then on a router's insert placed beside its entries writes them in its
 *     own statement (insert-beside.ts). A lookup built by an older version gets it here, from any later migrate.
 *
 * Moves. Every step that works on a shard holds the shard's lock, the one a move holds for its whole run
 * (shard-lock.ts), and reads where the shard lives under it, as `cluster migrate`'s steps do: a shard's DDL
 * (phases 1 and 2) and each backfill batch of its rows. So a build and a move of one shard never run at once: a
 * move cannot start while a step holds the shard (SHARD_BUSY), and a step on a shard a move holds stops the build
 * with SHARD_BUSY ("migrate again after the move"; a rerun resumes from the recorded phase and progress). Without
 * it, DDL could land in a shard the move has already copied (the new home would lack the entry table or the
 * trigger), and a batch could lock rows `FOR SHARE` in a copy that the switch has just left, while the row's
 * update commits at the new home: an entry for a value the row no longer holds. A batch's entries go to the
 * entry shards the map places under the lock; those shards are not locked (a batch writes to many), so an entry
 * shard whose move switches during the batch fails the batch with its fence's SF001 (or 42P01 once the old copy
 * is dropped): the batch is rolled back whole, recorded nowhere, and run again on the map read anew (for up to
 * ≈ 13 s, while the move finishes its switch) — never an entry written where no one reads it.
 */
export interface LookupBuildOptions {
  /** Rows per batch (default 1000). */
  batchSize?: number;
  /** Called after every batch with the lookup's shards done so far. */
  onProgress?: (lookup: string, done: number, total: number) => void;
  signal?: AbortSignal;
  /** How long a step waits for its shard's lock held by another migrate or build (default 10 000 ms). */
  shardLockWaitMs?: number;
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
  /** This run built the owner index of a unique lookup in every shard (step 5). */
  ownerIndexBuilt: boolean;
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
  let lock: pg.Client | undefined;
  try {
    const catalog = clients.get(config.catalog) as pg.Client;
    // The shard locks live on a connection of their own: its lock_timeout bounds only the wait for a lock.
    lock = await connectServer(config, config.catalog, { applicationName: 'shardflake lookup build lock' });
    await lock.query(`SET lock_timeout = ${Math.max(1, Math.round(options.shardLockWaitMs ?? 10_000))}`);
    await installLookupCatalog(catalog);
    const map = await readShardMap(catalog);
    const reports: LookupBuildReport[] = [];
    const duplicates: LookupDuplicate[] = [];
    for (const lookup of lookups) {
      const started = performance.now();
      const holding = shardHolder(lock, lookup.name);
      const record = await recordLookup(catalog, lookup, 'tables');
      if (!sameDefinition(record, lookup))
        throw new ShardflakeError(
          'INVALID_CONFIG',
          `${config.source}: lookup ${lookup.name} was built for ${describeLookup(record)}; a changed lookup needs a new name`,
        );
      const eachShard = async (sql: (schema: string) => string[]) => {
        for (const { shard } of map.shards) {
          options.signal?.throwIfAborted();
          await holding(shard, (s) =>
            inTransaction(clients.get(s.server) as pg.Client, sql(s.schema).join(';\n')),
          );
        }
      };
      // Step 5, for a lookup that is ready by now; then step 6.
      const ownerIndexStep = async () => {
        const built = lookup.unique && !record.ownerIndex;
        if (built) {
          await eachShard((schema) => ownerIndexSql(schema, lookup));
          await setOwnerIndex(catalog, lookup.name);
        }
        if (!record.directInsert) {
          await eachShard((schema) => [captureFunctionSql(schema, lookup)]);
          await setDirectInsert(catalog, lookup.name);
        }
        return built;
      };
      if (record.phase === 'ready') {
        const ownerIndexBuilt = await ownerIndexStep();
        reports.push({
          lookup: lookup.name,
          alreadyBuilt: true,
          ownerIndexBuilt,
          entriesWritten: 0,
          durationMs: ownerIndexBuilt ? performance.now() - started : 0,
        });
        continue;
      }
      const at = (phase: LookupPhase) => LOOKUP_PHASES.indexOf(record.phase) <= LOOKUP_PHASES.indexOf(phase);
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
      for (const source of map.shards) {
        const state = progress.get(source.shard);
        if (state?.done) continue;
        let lastId = state?.lastId ?? null;
        // After a duplicate the shard's scan goes on (to list every pair) but its progress stays before it.
        let frozen = false;
        for (;;) {
          options.signal?.throwIfAborted();
          const batch = await againIfAnEntryShardMoved(() =>
            holding(source.shard, async () => {
              // Read under the lock: the row shard stays where it is for the batch, entry shards are placed now.
              const now = await readShardMap(lock as pg.Client);
              return backfillBatch(
                clients,
                now.shards,
                lookup,
                now.shards[source.shard] as ShardPlacement,
                lastId,
                batchSize,
                config.layout,
              );
            }),
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
      }
      if (found.length > 0) {
        duplicates.push(...found);
        continue;
      }
      await setLookupPhase(catalog, lookup.name, 'ready');
      const ownerIndexBuilt = await ownerIndexStep();
      reports.push({
        lookup: lookup.name,
        alreadyBuilt: false,
        ownerIndexBuilt,
        entriesWritten: written,
        durationMs: performance.now() - started,
      });
    }
    if (duplicates.length > 0) throw duplicatesError(duplicates);
    return reports;
  } finally {
    await lock?.end().catch(() => {});
    await closeAll(clients);
  }
}

/**
 * Runs a step on one shard holding its lock, with where the shard lives now (see "Moves" at the top). A shard
 * a move holds, or that a crashed move left `moving`, stops the build with SHARD_BUSY.
 */
function shardHolder(lock: pg.Client, lookup: string) {
  const stopped = (shard: number, why: string) =>
    new ShardflakeError(
      'SHARD_BUSY',
      `building lookup ${lookup} stopped at shard ${shard}: ${why} (the build resumes where it stopped)`,
    );
  return async <T>(shard: number, step: (placement: ShardPlacement) => Promise<T>): Promise<T> => {
    const refused = await lockShardWaiting(lock, shard);
    if (refused) throw stopped(shard, refused);
    try {
      const placement = await readPlacement(lock, shard);
      if (placement.state === 'moving')
        throw stopped(
          shard,
          'the shard has an unfinished move (run cluster cleanup, or the move again); migrate again after it',
        );
      return await step(placement);
    } finally {
      await unlockShard(lock, shard);
    }
  };
}

/** How a batch meets an entry shard that moved: the old copy's fence, or the old copy gone. */
const ENTRY_SHARD_MOVED = [FENCED_SQLSTATE, '42P01', '3F000'];
/** Waits before running such a batch again (≈ 13 s in all: a move's switch follows its fence within its pause). */
const ENTRY_SHARD_WAITS_MS = [100, 200, 400, 800, 1600, 3200, 6400];

/** Runs a batch, again after a wait when one of its entry shards turned out to have moved (see "Moves" at the top). */
async function againIfAnEntryShardMoved<T>(batch: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await batch();
    } catch (error) {
      const state = sqlStateOf(error);
      const wait = ENTRY_SHARD_WAITS_MS[attempt];
      if (wait === undefined || state === undefined || !ENTRY_SHARD_MOVED.includes(state)) throw error;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
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

/** How often a batch tries again an entry whose value changed owner between its insert and the look after it. */
const ENTRY_ROUNDS = 20;

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
      `SELECT id, ${lookupValueSql(lookup, column)} AS value FROM ${table} WHERE id > $1 ORDER BY id LIMIT $2 FOR SHARE`,
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
      const entries = qualified(placement.schema, entryTable(lookup.name));
      let list = byShard.get(shard) as { value: string; id: bigint }[];
      // A value whose entry another id held when the insert skipped it may be let go before the entry is looked
      // at (that owner's change commits): such an entry is inserted again, until each is written or held by
      // another id (a duplicate). Each round settles at least the values whose holder did not change; a value
      // that changed owner between insert and look in every one of ENTRY_ROUNDS rounds fails the batch.
      for (let round = 1; list.length > 0; round++) {
        if (round > ENTRY_ROUNDS)
          throw new ShardflakeError(
            'MIGRATION_FAILED',
            `lookup ${lookup.name}: ${list.length} values of shard ${source.shard} changed owner during each of ${ENTRY_ROUNDS} attempts to write their entries; run cluster migrate again`,
          );
        const values = [list.map((e) => e.value), list.map((e) => e.id)];
        const inserted = await client.query(
          `INSERT INTO ${entries} (value, id) SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT DO NOTHING RETURNING id`,
          values,
        );
        written += inserted.rowCount ?? 0;
        if (!lookup.unique || inserted.rowCount === list.length) break;
        const held = await client.query(
          `SELECT g.value, g.id, (SELECT e.id FROM ${entries} e WHERE e.value = g.value) AS holder
             FROM unnest($1::text[], $2::bigint[]) AS g(value, id)`,
          values,
        );
        const again: { value: string; id: bigint }[] = [];
        for (const h of held.rows as { value: string; id: string; holder: string | null }[]) {
          if (h.holder === null) {
            again.push({ value: h.value, id: BigInt(h.id) });
            continue;
          }
          const owner = BigInt(h.holder);
          const other = BigInt(h.id);
          if (owner === other) continue;
          duplicates.push({
            lookup: lookup.name,
            owner: { id: owner, shard: shardOfIdFor(layout, owner) },
            other: { id: other, shard: source.shard },
          });
        }
        list = again;
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

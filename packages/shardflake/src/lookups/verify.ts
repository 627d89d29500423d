import { type AdoptionRouting, readAdoptionRouting } from '../catalog/adopt.js';
import { readLookups } from '../catalog/lookups.js';
import { readShardMap, type ShardPlacement } from '../catalog/shards.js';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import type { ClusterConfig } from '../config/config.js';
import type { LookupDefinition } from '../config/lookups.js';
import type { Problem, VerifyCheck } from '../config/verify-check.js';
import { ShardflakeError } from '../errors/errors.js';
import type { Queryable, ServerAccess } from '../postgres/connect.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { clusterAccess } from '../recovery/cluster-access.js';
import { isOldId, shardOfOldRootId } from '../routing/old-ids.js';
import { shardForKey } from '../routing/shard-key.js';
import { shardOfIdFor } from './build.js';
import { entryTable, lookupValueSql } from './ddl.js';

/**
 * `cluster verify`'s lookup check: every built lookup, both ways.
 *
 * - owner without entry: a row holds v in the column, and shard h(v) has no entry (v, id);
 * - entry without owner: an entry (v, id) whose row is gone; value mismatch: its row holds another value;
 * - misplaced entry: an entry in a shard other than h(v) (nothing would ever read it).
 *
 * A cross-server commit is atomic but not isolated (maintain.ts), so one read can catch a row committed on its
 * server and its entry's participant not yet (or the other way round). A problem is therefore reported only if a
 * second look, after the first pass, still finds it. `--repair` refuses to run while any server holds prepared
 * transactions (recovery settles them first: `cluster recover`); it adds a missing entry under a share lock on its
 * row (as the build does), deletes an entry without owner, with another value or misplaced after locking it and
 * looking again, and says what it could not fix: a missing entry of a unique lookup whose value another row holds
 * (two rows with one value: one must change, which only the application can decide).
 *
 * Messages name lookups, shards and ids, never values.
 */
export const LOOKUP_PROBLEM_KINDS = [
  'owner-without-entry',
  'entry-without-owner',
  'value-mismatch',
  'misplaced-entry',
] as const;
export type LookupProblemKind = (typeof LOOKUP_PROBLEM_KINDS)[number];

export interface LookupProblem {
  check: 'lookups';
  lookup: string;
  kind: LookupProblemKind;
  /** The row's id (for entries: the id the entry names). */
  id: bigint;
  /** The shard where the problem sits: the row's shard (owner-without-entry) or the entry's. */
  shard: number;
  message: string;
  /** With repair: what was done. */
  repaired?: boolean;
  unrepairable?: string;
}

export interface VerifyLookupsOptions {
  repair?: boolean;
  /** Rows read per statement (default 5000). */
  batchSize?: number;
}

interface Found {
  lookup: LookupDefinition;
  kind: LookupProblemKind;
  id: bigint;
  value: string;
  /** The entry's shard (entries) or the row's shard (owner-without-entry). */
  shard: number;
}

export async function verifyLookups(
  config: ClusterConfig,
  clients: ReadonlyMap<string, Queryable>,
  options: VerifyLookupsOptions = {},
): Promise<LookupProblem[]> {
  const lookups = config.lookups ?? [];
  if (lookups.length === 0) return [];
  const catalog = clients.get(config.catalog) as Queryable;
  const built = await readLookups(catalog);
  const map = await readShardMap(catalog);
  const batchSize = options.batchSize ?? 5000;
  const ctx: Context = {
    config,
    clients,
    shards: map.shards,
    batchSize,
    adoption: (await readAdoptionRouting(catalog)) ?? undefined,
  };
  if (options.repair) await refuseWhileInDoubt(clients);
  const problems: LookupProblem[] = [];
  for (const lookup of lookups) {
    if (built.get(lookup.name)?.phase !== 'ready') continue;
    const first = [
      ...(await ownersWithoutEntries(ctx, lookup)),
      ...(await entriesWithoutOwners(ctx, lookup)),
    ];
    // The second look: only what is still wrong counts.
    const confirmed: Found[] = [];
    for (const found of first) if (await stillWrong(ctx, found)) confirmed.push(found);
    for (const found of confirmed) {
      const problem: LookupProblem = {
        check: 'lookups',
        lookup: lookup.name,
        kind: found.kind,
        id: found.id,
        shard: found.shard,
        message: describe(found),
      };
      if (options.repair) Object.assign(problem, await repair(ctx, found));
      problems.push(problem);
    }
  }
  return problems;
}

interface Context {
  config: ClusterConfig;
  clients: ReadonlyMap<string, Queryable>;
  shards: readonly ShardPlacement[];
  batchSize: number;
  /** An adopted cluster's boundary of old ids (routing/old-ids.ts): their rows are found by their old-id rule. */
  adoption?: AdoptionRouting;
}

/**
 * The shard that holds row `id` of `table`: its shard bits, or in an adopted cluster for an old id the root's rule
 * (id mod shards) or its old-id entry (-1 when it has none).
 */
async function ownerShardOf(ctx: Context, table: string, id: bigint): Promise<number> {
  const a = ctx.adoption;
  if (!a || !isOldId(id, a.oldIdsBelow)) return shardOfIdFor(ctx.config.layout, id);
  const at = shardOfOldRootId(ctx.shards.length, id);
  if (table === a.root || !a.tables.includes(table)) return at;
  const e = client(ctx, at);
  const { rows } = await e.c.query(
    `SELECT shard FROM ${qualified(e.schema, OLD_IDS_TABLE)} WHERE tbl = $1 AND id = $2`,
    [table, id],
  );
  return (rows[0] as { shard: number } | undefined)?.shard ?? -1;
}

function describe(found: Found): string {
  const l = found.lookup.name;
  switch (found.kind) {
    case 'owner-without-entry':
      return `lookup ${l}: row ${found.id} in shard ${found.shard} has no entry`;
    case 'entry-without-owner':
      return `lookup ${l}: the entry in shard ${found.shard} for row ${found.id} has no such row`;
    case 'value-mismatch':
      return `lookup ${l}: the entry in shard ${found.shard} for row ${found.id} does not hold the row's value`;
    case 'misplaced-entry':
      return `lookup ${l}: an entry for row ${found.id} sits in shard ${found.shard}, not the shard of its value`;
  }
}

const client = (ctx: Context, shard: number) => {
  const p = ctx.shards[shard] as ShardPlacement;
  return { c: ctx.clients.get(p.server) as Queryable, schema: p.schema };
};

async function refuseWhileInDoubt(clients: ReadonlyMap<string, Queryable>): Promise<void> {
  for (const [server, c] of clients) {
    const { rows } = await c.query(
      'SELECT count(*)::int AS n FROM pg_prepared_xacts WHERE database = current_database()',
    );
    if ((rows[0] as { n: number }).n > 0)
      throw new ShardflakeError(
        'NOT_SUPPORTED',
        `server ${server} holds prepared transactions; run cluster recover first, then repair (a lookup change may be one of them)`,
      );
  }
}

/** Rows with a value whose entry is missing, scanned per row shard in id order. */
async function ownersWithoutEntries(ctx: Context, lookup: LookupDefinition): Promise<Found[]> {
  const found: Found[] = [];
  const column = quoteIdent(lookup.column, 'column');
  for (const placement of ctx.shards) {
    const { c, schema } = client(ctx, placement.shard);
    let after = -(2n ** 63n);
    for (;;) {
      const { rows } = await c.query(
        `SELECT id, ${lookupValueSql(lookup, column)} AS value FROM ${qualified(schema, lookup.table)}
          WHERE id > $1 AND ${column} IS NOT NULL ORDER BY id LIMIT $2`,
        [after, ctx.batchSize],
      );
      const batch = (rows as { id: string; value: string }[]).map((r) => ({
        id: BigInt(r.id),
        value: r.value,
      }));
      const byEntry = new Map<number, typeof batch>();
      for (const r of batch) {
        const s = shardForKey(r.value, ctx.shards.length);
        byEntry.set(s, [...(byEntry.get(s) ?? []), r]);
      }
      for (const [entryShard, list] of byEntry) {
        const e = client(ctx, entryShard);
        const present = await e.c.query(
          `SELECT g.id FROM unnest($1::text[], $2::bigint[]) AS g(value, id)
            WHERE EXISTS (SELECT 1 FROM ${qualified(e.schema, entryTable(lookup.name))} t WHERE t.value = g.value AND t.id = g.id)`,
          [list.map((r) => r.value), list.map((r) => r.id)],
        );
        const ok = new Set((present.rows as { id: string }[]).map((r) => BigInt(r.id)));
        for (const r of list)
          if (!ok.has(r.id))
            found.push({
              lookup,
              kind: 'owner-without-entry',
              id: r.id,
              value: r.value,
              shard: placement.shard,
            });
      }
      if (batch.length < ctx.batchSize) break;
      after = (batch[batch.length - 1] as { id: bigint }).id;
    }
  }
  return found;
}

/** Entries whose row is gone, holds another value, or that sit in the wrong shard; scanned per entry shard. */
async function entriesWithoutOwners(ctx: Context, lookup: LookupDefinition): Promise<Found[]> {
  const found: Found[] = [];
  const column = quoteIdent(lookup.column, 'column');
  for (const placement of ctx.shards) {
    const { c, schema } = client(ctx, placement.shard);
    let after: [string, bigint] | undefined;
    for (;;) {
      const { rows } = await c.query(
        `SELECT value, id FROM ${qualified(schema, entryTable(lookup.name))}
          WHERE $1::text IS NULL OR (value, id) > ($1::text, $2::bigint) ORDER BY value, id LIMIT $3`,
        [after?.[0] ?? null, after?.[1] ?? null, ctx.batchSize],
      );
      const batch = (rows as { id: string; value: string }[]).map((r) => ({
        id: BigInt(r.id),
        value: r.value,
      }));
      const byOwner = new Map<number, typeof batch>();
      for (const e of batch) {
        if (shardForKey(e.value, ctx.shards.length) !== placement.shard) {
          found.push({ lookup, kind: 'misplaced-entry', id: e.id, value: e.value, shard: placement.shard });
          continue;
        }
        const s = await ownerShardOf(ctx, lookup.table, e.id);
        byOwner.set(s, [...(byOwner.get(s) ?? []), e]);
      }
      for (const [ownerShard, list] of byOwner) {
        const o = ctx.shards[ownerShard] ? client(ctx, ownerShard) : undefined;
        const held = new Map<bigint, string | null>();
        if (o) {
          const { rows: owners } = await o.c.query(
            `SELECT id, ${lookupValueSql(lookup, column)} AS value FROM ${qualified(o.schema, lookup.table)} WHERE id = ANY($1::bigint[])`,
            [list.map((e) => e.id)],
          );
          for (const r of owners as { id: string; value: string | null }[]) held.set(BigInt(r.id), r.value);
        }
        for (const e of list) {
          if (!held.has(e.id))
            found.push({
              lookup,
              kind: 'entry-without-owner',
              id: e.id,
              value: e.value,
              shard: placement.shard,
            });
          else if (held.get(e.id) !== e.value)
            found.push({ lookup, kind: 'value-mismatch', id: e.id, value: e.value, shard: placement.shard });
        }
      }
      if (batch.length < ctx.batchSize) break;
      const last = batch[batch.length - 1] as { id: bigint; value: string };
      after = [last.value, last.id];
    }
  }
  return found;
}

/** Whether a problem is still there on a second look (row and entry read again). */
async function stillWrong(ctx: Context, found: Found): Promise<boolean> {
  const { lookup } = found;
  const entryShard =
    found.kind === 'owner-without-entry' ? shardForKey(found.value, ctx.shards.length) : found.shard;
  const e = client(ctx, entryShard);
  const entry = await e.c.query(
    `SELECT 1 FROM ${qualified(e.schema, entryTable(lookup.name))} WHERE value = $1 AND id = $2`,
    [found.value, found.id],
  );
  const ownerShard = await ownerShardOf(ctx, lookup.table, found.id);
  const holds = ctx.shards[ownerShard]
    ? (
        await client(ctx, ownerShard).c.query(
          `SELECT 1 FROM ${qualified(client(ctx, ownerShard).schema, lookup.table)} WHERE id = $1 AND ${lookupValueSql(lookup, quoteIdent(lookup.column, 'column'))} = $2`,
          [found.id, found.value],
        )
      ).rows.length > 0
    : false;
  const hasEntry = entry.rows.length > 0;
  if (found.kind === 'owner-without-entry') return holds && !hasEntry;
  if (found.kind === 'misplaced-entry') return hasEntry;
  return hasEntry && !holds;
}

/** How often a repair tries again an entry whose value changed owner between its insert and the look after it. */
const REPAIR_ROUNDS = 20;

async function repair(ctx: Context, found: Found): Promise<Pick<LookupProblem, 'repaired' | 'unrepairable'>> {
  const { lookup } = found;
  if (found.kind === 'owner-without-entry') {
    const ownerShard = found.shard;
    const o = client(ctx, ownerShard);
    const entryShard = shardForKey(found.value, ctx.shards.length);
    const e = client(ctx, entryShard);
    const table = qualified(e.schema, entryTable(lookup.name));
    // As the build does: the row stays as read (FOR SHARE) until its entry is committed.
    await o.c.query('BEGIN');
    try {
      const { rows } = await o.c.query(
        `SELECT 1 FROM ${qualified(o.schema, lookup.table)} WHERE id = $1 AND ${lookupValueSql(lookup, quoteIdent(lookup.column, 'column'))} = $2 FOR SHARE`,
        [found.id, found.value],
      );
      if (rows.length === 0) {
        await o.c.query('ROLLBACK');
        return { repaired: true };
      }
      const sameClient = e.c === o.c;
      if (!sameClient) await e.c.query('BEGIN');
      let unrepairable: string | undefined;
      // The insert skips the value when another id holds it; that holder may let it go before the look that
      // follows (its change commits), and then the insert is tried again (lookups/maintain.ts, entryStatements).
      for (let round = 1; ; round++) {
        if (round > REPAIR_ROUNDS) {
          unrepairable = `the value changed owner during each of ${REPAIR_ROUNDS} attempts to write its entry; run verify --repair again`;
          break;
        }
        const inserted = await e.c.query(
          `INSERT INTO ${table} (value, id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id`,
          [found.value, found.id],
        );
        if (inserted.rows.length > 0) break;
        const held = await e.c.query(
          `SELECT id FROM ${table} WHERE value = $1 ORDER BY id = $2 DESC LIMIT 1`,
          [found.value, found.id],
        );
        const holder = (held.rows[0] as { id: string } | undefined)?.id;
        if (holder === undefined) continue;
        if (BigInt(holder) !== BigInt(found.id))
          unrepairable = `row ${holder} holds the same value in this unique lookup; change one of the two rows`;
        break;
      }
      if (!sameClient) await e.c.query('COMMIT');
      await o.c.query('COMMIT');
      return unrepairable ? { repaired: false, unrepairable } : { repaired: true };
    } catch (error) {
      await e.c.query('ROLLBACK').catch(() => {});
      await o.c.query('ROLLBACK').catch(() => {});
      throw error;
    }
  }
  // An entry to delete: locked, and the owner looked at again under the lock, so a row that came to hold the value
  // meanwhile keeps its entry.
  const e = client(ctx, found.shard);
  const table = qualified(e.schema, entryTable(lookup.name));
  await e.c.query('BEGIN');
  try {
    await e.c.query(`SELECT 1 FROM ${table} WHERE value = $1 AND id = $2 FOR UPDATE`, [
      found.value,
      found.id,
    ]);
    if (found.kind !== 'misplaced-entry' && !(await stillWrong(ctx, found))) {
      await e.c.query('ROLLBACK');
      return { repaired: true };
    }
    await e.c.query(`DELETE FROM ${table} WHERE value = $1 AND id = $2`, [found.value, found.id]);
    await e.c.query('COMMIT');
    return { repaired: true };
  } catch (error) {
    await e.c.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** Every server's connection of `pools` at once, for the length of `fn`. */
async function withEveryServer<T>(
  pools: ServerAccess,
  fn: (clients: Map<string, Queryable>) => Promise<T>,
): Promise<T> {
  const clients = new Map<string, Queryable>();
  const next = async (i: number): Promise<T> => {
    const server = pools.servers[i];
    if (server === undefined) return fn(clients);
    return pools.use(server, async (client) => {
      clients.set(server, client);
      return next(i + 1);
    });
  };
  return next(0);
}

/** The lookup check of `cluster verify` (verify.ts): reads only. */
export const lookupCheck: VerifyCheck = {
  name: 'lookups',
  async run(config, pools): Promise<Problem[]> {
    const problems = await withEveryServer(pools, (clients) => verifyLookups(config, clients));
    return problems.map((p) => ({ check: 'lookups', where: `shard ${p.shard}`, what: p.message }));
  },
};

/** `cluster verify --repair`'s part: verifies every lookup and repairs what it can (see the top of the file). */
export async function repairLookups(config: ClusterConfig): Promise<LookupProblem[]> {
  const pools = clusterAccess(config, 'shardflake verify --repair');
  try {
    return await withEveryServer(pools, (clients) => verifyLookups(config, clients, { repair: true }));
  } finally {
    await pools.close();
  }
}

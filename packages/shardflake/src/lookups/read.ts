import type { LookupDefinition } from '../config/lookups.js';
import { kindOf, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { ShardflakeId } from '../ids/id.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import type { RouterContext } from '../routing/context.js';
import { acquireOn, isConnectionLost } from '../routing/lease.js';
import { type MapState, placementIn, shardOfIdIn } from '../routing/map.js';
import { routedStatement } from '../routing/rows.js';
import { shardForKey } from '../routing/shard-key.js';
import { entryTable, lookupText, lookupValueSql } from './ddl.js';
import { OwnerCache, ownerByValueSql } from './owner-cache.js';

/**
 * Finding rows by a lookup's value: the entry shard h(value) gives candidate ids, and each candidate is checked in
 * its owner's shard (the row must exist and hold the value), so an entry seen before its owner row commits on
 * another server, or a leftover entry, never returns a wrong row (maintain.ts, "Reads").
 *
 * `lookup` is two routed reads (entry, owner); for a unique lookup whose owner the router's owner cache holds,
 * one read of the owner by its value (owner-cache.ts, with the argument), and the two reads after a miss.
 * `lookupMany` is one statement per server for the entries (a UNION ALL over that server's entry shards) and one
 * per server for the owners.
 */
export interface LookupHit {
  /** The id of a row that holds the value now (checked in its owner shard, not only in the lookup entry). */
  id: ShardflakeId;
  /** The logical shard the row lives in, from the id's shard bits. */
  shard: number;
}

/** Options of `router.lookup`. */
export interface LookupOptions {
  /** Also return the owner row (read by the owner check itself: no third round trip). */
  fetch?: boolean;
}

/** A hit with its row (`lookup(name, value, { fetch: true })`). */
export interface LookupHitWithRow extends LookupHit {
  /** The whole owner row (`SELECT *`), read by the same statement that checked it still holds the value. */
  row: Record<string, unknown>;
}

/** A value to look up: it is compared as the text PostgreSQL gives the column's value (`column::text`). */
export type LookupValue = string | number | bigint;

/** The value's text form, the one entries hold (`column::text`). */
export function valueText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'bigint') return String(value);
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new ShardflakeError(
    'INVALID_ARGUMENT',
    `a lookup value must be a string, a finite number or a bigint, not ${kindOf(value)}`,
  );
}

/**
 * Readiness of a lookup (built by `cluster migrate`), asked of the catalog; resolves to whether every shard has
 * its owner index (the owner cache may be used).
 */
export type Readiness = (lookup: LookupDefinition) => Promise<boolean>;

export interface LookupReader {
  lookup(
    name: string,
    value: LookupValue,
    options?: LookupOptions,
  ): Promise<LookupHit | LookupHitWithRow | null>;
  lookupMany(name: string, values: readonly LookupValue[]): Promise<(LookupHit | null)[]>;
}

export function createLookupReader(
  ctx: RouterContext,
  lookups: readonly LookupDefinition[],
  ready: Readiness,
  /** Values the owner cache holds at most (0: no cache). */
  cacheSize = 0,
): LookupReader {
  const byName = new Map(lookups.map((l) => [l.name, l]));
  const owners = new OwnerCache(cacheSize);
  // Statement texts are built once per (schema, lookup), as the router's own are (statements.ts).
  const texts = new Map<string, string>();
  const cached = (key: string, build: () => string): string => {
    let text = texts.get(key);
    if (text === undefined) {
      text = build();
      texts.set(key, text);
    }
    return text;
  };
  /** The lookup, and whether the owner cache may answer for it. */
  const definition = async (name: string): Promise<{ def: LookupDefinition; cacheable: boolean }> => {
    const found = typeof name === 'string' ? byName.get(name) : undefined;
    if (!found)
      throw new ShardflakeError(
        'LOOKUP_NOT_READY',
        `no lookup named ${shown(name)} in the router's config (lookups: ${[...byName.keys()].join(', ') || 'none'})`,
      );
    const indexed = await ready(found);
    return { def: found, cacheable: found.unique && indexed && cacheSize > 0 };
  };

  /** A hit of the owner cache (owner-cache.ts): the owner read by its value in the cached shard, or undefined. */
  const cachedOwner = async (
    def: LookupDefinition,
    text: string,
    shard: number,
    fetch: boolean,
  ): Promise<LookupHit | LookupHitWithRow | undefined> => {
    const { rows } = await routedStatement(
      ctx,
      'get',
      () => shard,
      false,
      (schema) => cached(`c\0${schema}\0${def.name}\0${fetch}`, () => ownerByValueSql(schema, def, fetch)),
      [text],
    );
    const found = rows[0] as Record<string, unknown> | undefined;
    if (!found || rows.length > 1) return undefined;
    const id = BigInt(found.id as bigint) as ShardflakeId;
    // A row of S always has an id of S, but an id can be rewritten by hand: the answer must agree with the entry path.
    if (shardOfIdIn(await ctx.map.fresh(), id) !== shard) return undefined;
    return fetch ? { id, shard, row: found } : { id, shard };
  };

  return {
    async lookup(name, value, options) {
      const fetch = options?.fetch === true;
      const { def, cacheable } = await definition(name);
      const text = lookupText(def, valueText(value));
      // While an adoption serves every shard from the source (routing/old-ids.ts), the source's own table is
      // the truth: its unique constraint still holds, and the entries are being built on the shards.
      if ((await ctx.map.fresh()).adoption?.servingFromSource) {
        const { rows } = await routedStatement(
          ctx,
          'get',
          () => 0,
          false,
          (schema) =>
            `SELECT ${fetch ? '*' : 'id'} FROM ${qualified(schema, def.table)} WHERE ${lookupValueSql(def, quoteIdent(def.column, 'column'))} = $1 LIMIT 1`,
          [text],
        );
        const found = rows[0] as Record<string, unknown> | undefined;
        if (!found) return null;
        const id = BigInt(found.id as bigint) as ShardflakeId;
        const shard = shardOfIdIn(await ctx.map.fresh(), id);
        return fetch ? { id, shard, row: found } : { id, shard };
      }
      const known = cacheable ? owners.get(def.name, text) : undefined;
      if (known !== undefined) {
        const hit = await cachedOwner(def, text, known, fetch);
        if (hit) return hit;
        owners.delete(def.name, text);
      }
      const entries = await routedStatement(
        ctx,
        'get',
        (map) => shardForKey(text, map.logicalShards),
        false,
        (schema) =>
          cached(
            `e\0${schema}\0${def.name}`,
            () => `SELECT id FROM ${qualified(schema, entryTable(def.name))} WHERE value = $1`,
          ),
        [text],
      );
      for (const row of entries.rows as { id: bigint }[]) {
        // Entries hold ids the cluster made (its own rows), so they are ids by construction.
        const id = BigInt(row.id) as ShardflakeId;
        const owner = await routedStatement(
          ctx,
          'get',
          (map) => shardOfIdIn(map, id),
          false,
          (schema) =>
            cached(
              `o\0${schema}\0${def.name}\0${fetch}`,
              () =>
                `SELECT ${fetch ? '*' : 'id'} FROM ${qualified(schema, def.table)} WHERE id = $1 AND ${lookupValueSql(def, quoteIdent(def.column, 'column'))} = $2`,
            ),
          [id, text],
        );
        const found = owner.rows[0] as Record<string, unknown> | undefined;
        if (found) {
          const shard = shardOfIdIn(await ctx.map.fresh(), id);
          if (cacheable) owners.set(def.name, text, shard);
          return fetch ? { id, shard, row: found } : { id, shard };
        }
      }
      return null;
    },

    async lookupMany(name, values) {
      const { def } = await definition(name);
      if (!Array.isArray(values))
        throw new ShardflakeError('INVALID_ARGUMENT', 'lookupMany needs an array of values');
      if ((await ctx.map.fresh()).adoption?.servingFromSource)
        return Promise.all(values.map((v) => this.lookup(def.name, v)));
      const texts = values.map((v) => lookupText(def, valueText(v)));
      const map = await ctx.map.fresh();
      // Entries: one statement per server over the entry shards of the values.
      const byEntryShard = groupBy(texts, (t) => shardForKey(t, map.logicalShards));
      const candidates = await perServer(
        ctx,
        map,
        byEntryShard,
        (schema, p) =>
          `SELECT value, id FROM ${qualified(schema, entryTable(def.name))} WHERE value = ANY(${p}::text[])`,
      );
      // Owners: one statement per server over the candidates' shards; the row must still hold the value.
      const ids = [...new Set(candidates.map((c) => BigInt(c.id as bigint) as ShardflakeId))];
      const byOwnerShard = groupBy(ids, (id) => shardOfIdIn(map, id));
      const column = quoteIdent(def.column, 'column');
      const owners = await perServer(
        ctx,
        map,
        byOwnerShard,
        (schema, p) =>
          `SELECT id, ${lookupValueSql(def, column)} AS value FROM ${qualified(schema, def.table)} WHERE id = ANY(${p}::bigint[])`,
      );
      const held = new Set(owners.map((o) => `${o.value}\0${o.id}`));
      const hit = new Map<string, LookupHit>();
      for (const c of candidates) {
        const id = BigInt(c.id as bigint) as ShardflakeId;
        const value = c.value as string;
        if (held.has(`${value}\0${id}`) && !hit.has(value))
          hit.set(value, { id, shard: shardOfIdIn(map, id) });
      }
      return texts.map((t) => hit.get(t) ?? null);
    },
  };
}

function groupBy<T>(items: readonly T[], shardOf: (item: T) => number): Map<number, T[]> {
  const groups = new Map<number, T[]>();
  for (const item of items) {
    const shard = shardOf(item);
    const list = groups.get(shard);
    if (list) {
      if (!list.includes(item)) list.push(item);
    } else groups.set(shard, [item]);
  }
  return groups;
}

/** One statement per server: a UNION ALL of `select(schema, $n)` over the server's shards, each with its list. */
async function perServer(
  ctx: RouterContext,
  map: MapState,
  byShard: Map<number, unknown[]>,
  select: (schema: string, parameter: string) => string,
): Promise<Record<string, unknown>[]> {
  const servers = new Map<string, { shard: number; schema: string; items: unknown[] }[]>();
  for (const [shard, items] of byShard) {
    const placement = placementIn(map, shard);
    const list = servers.get(placement.server) ?? [];
    list.push({ shard, schema: placement.schema, items });
    servers.set(placement.server, list);
  }
  const results = await Promise.all(
    [...servers].map(async ([server, parts]) => {
      const text = parts.map((part, i) => select(part.schema, `$${i + 1}`)).join(' UNION ALL ');
      const lease = await acquireOn(ctx, server, {
        intent: 'read',
        after: ctx.positions.get(server),
        shard: parts[0]?.shard,
      });
      lease.touch(parts.map((p) => p.shard));
      try {
        const { rows } = await lease.client.query(
          text,
          parts.map((p) => p.items),
        );
        lease.release();
        return rows as Record<string, unknown>[];
      } catch (error) {
        lease.release(isConnectionLost(error, lease.client) ? error : undefined);
        throw wrapPgError(error, lease.node);
      }
    }),
  );
  return results.flat();
}

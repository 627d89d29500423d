import type { AdoptConfig } from '../config/adopt.js';
import type { ClusterConfig } from '../config/config.js';
import type { LookupDefinition } from '../config/lookups.js';
import { ShardflakeError } from '../errors/errors.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import type { SourceTable } from './source-schema.js';

/**
 * The adoption as the engine uses it: for every adopted table, its columns (the source's order, which the plan's
 * templates keep), its key, where its rows go, its lookups and whether it has old-id entries.
 */
export interface TableModel {
  name: string;
  kind: 'sharded' | 'reference';
  columns: string[];
  /** Primary key columns. */
  key: string[];
  /** Sharded tables: the placement column, and the table it points at (none for the root). */
  column?: string;
  parent?: string;
  /** Old-id entries: non-root sharded tables with a one-column integer key (that column). */
  entryId?: string;
  lookups: LookupDefinition[];
  /** Sharded tables placed beside this one's rows. */
  children: string[];
  estimate: bigint;
}

export interface AdoptModel {
  config: ClusterConfig;
  adopt: AdoptConfig;
  logicalShards: number;
  root: string;
  tables: Map<string, TableModel>;
  /** Sharded tables in placement order (parents before children), then the reference tables. */
  order: string[];
}

export function buildModel(config: ClusterConfig, source: readonly SourceTable[]): AdoptModel {
  const adopt = config.adopt;
  if (!adopt) throw new ShardflakeError('INVALID_CONFIG', `${config.source}: has no adopt section`);
  const byName = new Map(source.map((t) => [t.name, t]));
  const tables = new Map<string, TableModel>();
  const missing = [...Object.keys(adopt.place), ...adopt.reference].filter((n) => !byName.has(n));
  if (missing.length > 0)
    throw new ShardflakeError(
      'ADOPT_REFUSED',
      `the source has no table ${missing.join(', ')} in schema ${adopt.schema}; was it renamed since adopt plan?`,
    );
  const depth = (name: string): number => {
    const p = adopt.place[name];
    return p?.parent === undefined ? 0 : 1 + depth(p.parent);
  };
  const sharded = Object.keys(adopt.place).sort((a, b) => depth(a) - depth(b) || a.localeCompare(b));
  for (const name of [...sharded, ...adopt.reference]) {
    const t = byName.get(name) as SourceTable;
    if (!t.primaryKey)
      throw new ShardflakeError(
        'ADOPT_REFUSED',
        `table ${name} has no primary key; add one (see adopt plan)`,
      );
    const p = adopt.place[name];
    const key = t.primaryKey;
    const intKey = key.length === 1 && t.columns.find((c) => c.name === key[0])?.integer === true;
    tables.set(name, {
      name,
      kind: p ? 'sharded' : 'reference',
      columns: t.columns.map((c) => c.name),
      key,
      ...(p ? { column: p.column } : {}),
      ...(p?.parent !== undefined ? { parent: p.parent } : {}),
      ...(p && name !== adopt.root && intKey ? { entryId: key[0] as string } : {}),
      lookups: (config.lookups ?? []).filter((l) => l.table === name),
      children: Object.entries(adopt.place)
        .filter(([, q]) => q.parent === name)
        .map(([child]) => child),
      estimate: t.estimate < 0n ? 0n : t.estimate,
    });
  }
  return {
    config,
    adopt,
    logicalShards: config.logicalShards,
    root: adopt.root,
    tables,
    order: [...sharded, ...adopt.reference],
  };
}

/** The shard of an old root id (or of a value that holds one): the integer key rule, id mod logicalShards. */
export function shardOfOldRootId(id: bigint, logicalShards: number): number {
  const n = BigInt(logicalShards);
  return Number(((id % n) + n) % n);
}

/**
 * The SQL (on the source) that gives a row of `table` its shard, and the FROM clause it needs: the root by its id,
 * a child by its parent's placement, through one join per hop (the source's foreign keys make every join find its
 * row).
 */
export function placementSql(model: AdoptModel, table: string): { shard: string; from: string } {
  const schema = model.adopt.schema;
  const n = model.logicalShards;
  let alias = 't';
  let from = `${qualified(schema, table)} AS t`;
  let at = model.tables.get(table) as TableModel;
  for (let hop = 1; at.parent !== undefined; hop++) {
    const parent = model.tables.get(at.parent) as TableModel;
    if (parent.parent === undefined) break;
    const next = `p${hop}`;
    from += ` JOIN ${qualified(schema, parent.name)} AS ${next} ON ${next}.${quoteIdent(parent.key[0] as string)} = ${alias}.${quoteIdent(at.column as string)}`;
    alias = next;
    at = parent;
  }
  const value = `${alias}.${quoteIdent(at.column as string)}`;
  return { shard: `((${value} % ${n}) + ${n}) % ${n}`, from };
}

import { expectObject } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import type { Layout } from '../ids/layout.js';
import { quoteIdent, validateIdentifier } from './identifier.js';

/**
 * The one rule for "may this id live in shard N", as a predicate (for code) and as SQL (for PostgreSQL), both made
 * here from the layout's shard field, so they cannot disagree.
 *
 * Why (issue 32, item 5): the router finds a row by the shard its id names (`get`, `update`, `delete`, lookups,
 * `shardOfId`). A row written with an explicit id whose bits name another shard exists but is never found: `get`
 * returns null and `cluster verify`'s lookup check fails. So such a row is refused at write, in PostgreSQL itself,
 * whatever wrote it (router, raw SQL in a session, Kysely, Drizzle, psql): a CHECK constraint
 * `_shardflake_id_in_this_shard` on every sharded table whose `id` column is filled by the shard's `next_id()`
 * (a table whose ids are its own, with no such default, is left alone).
 *
 * The rule: an id is allowed in shard N when it is not negative and its shard field holds N; or, when the cluster
 * keeps old ids (adopting a live database: its rows keep their bigserial ids, which carry no shard bits), when
 * 0 ≤ id < oldIdsBelow. Negative ids are never old (bigserial is positive) and never made by `next_id()`.
 *
 * Installed idempotently (`idShardCheckSql`): a table whose constraint already says this rule (its comment
 * records the rule) is left alone; one with another rule (oldIdsBelow changed) gets the new one. New shards get
 * it validated (their tables are empty); `cluster migrate` adds it to existing shards NOT VALID (a brief lock, no
 * scan: new writes are checked at once) and then validates it (a scan that takes no lock writers wait on). Rows
 * that already break it leave the constraint NOT VALID and are reported by `cluster verify` (admin/ids-verify.ts).
 */
export interface IdShardRule {
  /** Ids in 0 ≤ id < oldIdsBelow are allowed in any shard (adopted rows); null: none. */
  readonly oldIdsBelow: bigint | null;
  /** True when `id` may be the id of a row in shard `shard`. */
  allows(id: bigint, shard: number): boolean;
  /** The shard `id`'s bits name (whatever the rule says of old ids). */
  shardOf(id: bigint): number;
  /** The CHECK expression over the column `id` for shard `shard` (the same rule as `allows`). */
  checkSql(shard: number): string;
  /** The rule in words, recorded as the constraint's comment: a constraint with another comment is replaced. */
  marker(shard: number): string;
}

/** The constraint's name on every checked table: what psql shows when a write breaks it. */
export const ID_CHECK_CONSTRAINT = '_shardflake_id_in_this_shard';

/** Version of the rule's SQL, in the marker: a newer shardflake that changes the SQL replaces older constraints. */
const RULE_VERSION = 1;

/**
 * The one boundary check of old ids: an id in 0 ≤ id < oldIdsBelow was made by a database the cluster adopted
 * (adopt/), not by a shard's next_id(), so its bits say nothing of its shard. The router (routing/old-ids.ts) and
 * the rule below both ask this.
 */
export function isOldId(id: bigint, oldIdsBelow: bigint | null | undefined): boolean {
  return oldIdsBelow !== null && oldIdsBelow !== undefined && id >= 0n && id < oldIdsBelow;
}

/**
 * The rule for a cluster's layout (with its epoch) and, for a cluster that keeps adopted rows' old ids, the bound
 * below which ids are exempt (default none). The function the adoption work calls with its bound.
 */
export function idShardRule(layout: Layout, oldIdsBelow: bigint | null = null): IdShardRule {
  expectObject(layout, 'idShardRule: layout');
  const field = layout.fields.find((f) => f.kind === 'shard');
  if (!field)
    throw new ShardflakeError(
      'INVALID_LAYOUT',
      `layout ${layout.name} has no shard field: ids name no shard`,
    );
  if (oldIdsBelow !== null && (typeof oldIdsBelow !== 'bigint' || oldIdsBelow < 0n))
    throw new ShardflakeError('INVALID_ARGUMENT', 'oldIdsBelow must be a bigint ≥ 0, or null for none');
  const shift = BigInt(field.shift);
  const mask = field.max;
  const shardOf = (id: bigint) => Number((id >> shift) & mask);
  return Object.freeze({
    oldIdsBelow,
    shardOf,
    allows: (id: bigint, shard: number) => isOldId(id, oldIdsBelow) || (id >= 0n && shardOf(id) === shard),
    checkSql(shard: number) {
      // `>>` on bigint shifts arithmetically; the mask keeps the shard field's bits only.
      const own = `((id >> ${shift}) & ${mask}) = ${checkedShard(shard, mask)}`;
      return oldIdsBelow === null ? `id >= 0 AND ${own}` : `id >= 0 AND (id < ${oldIdsBelow} OR ${own})`;
    },
    marker: (shard: number) =>
      `shardflake id rule v${RULE_VERSION}: the shard field (bits ${field.shift}..${field.shift + field.bits - 1}) names shard ${shard}${oldIdsBelow === null ? '' : `, or 0 <= id < ${oldIdsBelow} (old ids)`}`,
  });
}

function checkedShard(shard: number, mask: bigint): number {
  if (!Number.isSafeInteger(shard) || shard < 0 || BigInt(shard) > mask)
    throw new ShardflakeError('OUT_OF_RANGE', `shard ${shard} does not fit the layout's shard field`);
  return shard;
}

/**
 * The tables of shard schemas the rule applies to, with their constraint's state: ordinary tables (not
 * shardflake's own `_shardflake…`) whose bigint `id` column defaults to a `next_id()` — known from the default's
 * recorded dependency on the function, not by printing it: pg_get_expr opens the relation it prints for, and a
 * scan of every default would then wait behind any table's exclusive lock. `schemas` is SQL for a
 * text array (a parameter such as `$1::text[]`, or a literal). Also used by migrate and verify.
 *
 * Every step goes through an index from the schemas named, so the cost is that of their own tables, whatever else
 * the server holds. The tables are found through their dependency on the schema (pg_class has no index on
 * `relnamespace`: a join on it read all of pg_class, every shard's tables, for each shard `cluster init` or a move
 * created), and the function through its oid. The planner is not left to choose: right after thousands of shards
 * were made the catalogs' statistics still describe a nearly empty server, and it had joined every column default
 * of the server with every `next_id()` to check one schema (30–60 ms per shard at 512 shards). Each `LATERAL …
 * OFFSET 0` is a step it cannot flatten into the join, so each is an index scan keyed by the row before it; the
 * default's functions are an `ARRAY(…)` subquery, run for each default, where an `EXISTS` would be turned into a
 * join over every default's dependencies.
 */
export function checkedTablesSql(schemas: string): string {
  return `SELECT n.nspname::text AS schema, tab.relname::text AS name, tab.oid::regclass AS rel, con.convalidated AS valid,
       obj_description(con.oid, 'pg_constraint') AS marker
  FROM unnest(${schemas}) AS named(nspname)
  CROSS JOIN LATERAL (SELECT n.oid, n.nspname FROM pg_namespace n WHERE n.nspname = named.nspname OFFSET 0) n
  CROSS JOIN LATERAL (SELECT c.oid, c.relname FROM pg_depend o JOIN pg_class c ON c.oid = o.objid
                       WHERE o.refclassid = 'pg_namespace'::regclass AND o.refobjid = n.oid AND o.refobjsubid = 0
                         AND o.classid = 'pg_class'::regclass AND c.relkind = 'r' AND NOT c.relispartition
                         AND c.relname NOT LIKE '\\_shardflake%' OFFSET 0) tab
  CROSS JOIN LATERAL (SELECT d.oid FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                       WHERE a.attrelid = tab.oid AND a.attname = 'id' AND NOT a.attisdropped
                         AND a.atttypid = 'int8'::regtype OFFSET 0) d
  LEFT JOIN LATERAL (SELECT con.oid, con.convalidated FROM pg_constraint con
                      WHERE con.conrelid = tab.oid AND con.connamespace = n.oid
                        AND con.conname = '${ID_CHECK_CONSTRAINT}' OFFSET 0) con ON true
 WHERE 'next_id' = ANY (ARRAY(SELECT p.proname FROM pg_depend dep JOIN pg_proc p ON p.oid = dep.refobjid
                              WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                                AND dep.refclassid = 'pg_proc'::regclass))`;
}

/** A table the rule applies to, as checkedTablesSql reads it. */
export interface CheckedTable {
  schema: string;
  name: string;
  valid: boolean | null;
  marker: string | null;
}

/** True when `table` (of `shard`) carries this rule, validated. */
export function carriesRule(table: CheckedTable, rule: IdShardRule, shard: number): boolean {
  return table.valid === true && table.marker === rule.marker(shard);
}

/**
 * SQL that puts the rule on every table of `schema` it applies to, idempotently (one DO block, run in the shard's
 * own transaction). `validated`: add it checked at once (a new shard's empty tables); otherwise NOT VALID (no scan,
 * a brief lock) for `validateIdChecksSql` to check later.
 */
export function idShardCheckSql(
  schema: string,
  shard: number,
  rule: IdShardRule,
  validated: boolean,
): string {
  const name = validateIdentifier(schema, 'schema');
  const literal = (text: string) => `'${text.replace(/'/g, "''")}'`;
  const tables = checkedTablesSql(`ARRAY[${literal(name)}]`);
  return `DO $shardflake_id_rule$
DECLARE t record;
BEGIN
  FOR t IN ${tables} LOOP
    CONTINUE WHEN t.marker IS NOT DISTINCT FROM ${literal(rule.marker(shard))};
    IF t.marker IS NOT NULL OR t.valid IS NOT NULL THEN
      EXECUTE format('ALTER TABLE %s DROP CONSTRAINT ${ID_CHECK_CONSTRAINT}', t.rel);
    END IF;
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT ${ID_CHECK_CONSTRAINT} CHECK (${rule.checkSql(shard)})${validated ? '' : ' NOT VALID'}', t.rel);
    EXECUTE format('COMMENT ON CONSTRAINT ${ID_CHECK_CONSTRAINT} ON %s IS %L', t.rel, ${literal(rule.marker(shard))});
  END LOOP;
END
$shardflake_id_rule$`;
}

/** Validates the rule's constraint on one table of a shard schema. */
export function validateIdCheckSql(schema: string, table: string): string {
  return `ALTER TABLE ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} VALIDATE CONSTRAINT ${ID_CHECK_CONSTRAINT}`;
}

import { ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';

/** The tables of a shard schema as a move sees them: names, primary keys and shapes, on either server. */
export interface SourceTable {
  name: string;
  primaryKey: string[];
  /** `column type, …` in column order: the shape both copies must share. */
  shape: string;
}

/** The schema's tables with their primary keys and shapes (ordered by name). */
export async function listTables(client: Queryable, schema: string): Promise<SourceTable[]> {
  return (await listTablesOfSchemas(client, [schema])).get(schema) ?? [];
}

/** `listTables` for many schemas in one query (a set): every listed schema gets an entry, empty when missing. */
export async function listTablesOfSchemas(
  client: Queryable,
  schemas: readonly string[],
): Promise<Map<string, SourceTable[]>> {
  const { rows } = await client.query(
    `SELECT n.nspname AS schema, c.relname AS name,
            coalesce((SELECT array_agg(a.attname::text ORDER BY k.ord)
                        FROM pg_index i
                        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
                       WHERE i.indrelid = c.oid AND i.indisprimary), '{}') AS pk,
            (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
               FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS shape
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ANY($1::text[]) AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      ORDER BY n.nspname, c.relname`,
    [schemas],
  );
  const bySchema = new Map<string, SourceTable[]>(schemas.map((s) => [s, []]));
  for (const r of rows as { schema: string; name: string; pk: string[]; shape: string }[]) {
    bySchema.get(r.schema)?.push({ name: r.name, primaryKey: r.pk, shape: r.shape ?? '' });
  }
  return bySchema;
}

/** Which of `schemas` exist on this server. */
export async function existingSchemas(client: Queryable, schemas: readonly string[]): Promise<Set<string>> {
  const { rows } = await client.query(
    'SELECT nspname::text AS s FROM pg_namespace WHERE nspname = ANY($1::text[])',
    [schemas],
  );
  return new Set((rows as { s: string }[]).map((r) => r.s));
}

/** Which of `tables` (qualified names) hold a row: one query per 500 tables. */
export async function tablesWithRows(client: Queryable, tables: readonly string[]): Promise<string[]> {
  const filled: string[] = [];
  for (let i = 0; i < tables.length; i += 500) {
    const part = tables.slice(i, i + 500);
    const { rows } = await client.query(
      `SELECT i FROM (VALUES ${part.map((t, k) => `(${k}, EXISTS (SELECT FROM ${t}))`).join(', ')}) AS v(i, filled) WHERE filled`,
    );
    filled.push(...(rows as { i: number }[]).map((r) => part[r.i] as string));
  }
  return filled;
}

/** Refuses a table without a primary key: logical replication could not apply its UPDATEs and DELETEs. */
export function requirePrimaryKeys(schema: string, tables: readonly SourceTable[]): void {
  const missing = tables.filter((t) => t.primaryKey.length === 0).map((t) => `${schema}.${t.name}`);
  if (missing.length > 0) {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `cannot move: table ${missing.join(', ')} has no primary key, so logical replication could not copy its updates and deletes; add one with a migration and move again`,
    );
  }
}

export async function dropSchema(client: Queryable, schema: string): Promise<void> {
  await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema, 'schema')} CASCADE`);
}

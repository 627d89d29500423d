import type { Queryable } from '../postgres/connect.js';

/**
 * Plain (non-unique) indexes of the schema, with their full definitions. The target gets them only after the
 * initial copy: building an index over sorted data once is several times faster than updating it row by row
 * during COPY (on 200,000 rows with one secondary index: 1.4 s instead of 3.3 s here). Primary keys and unique
 * indexes stay during the copy, since applying replicated updates and deletes needs them.
 */
export async function deferrableIndexes(
  client: Queryable,
  schema: string,
): Promise<{ name: string; definition: string }[]> {
  const { rows } = await client.query(
    `SELECT ic.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i
       JOIN pg_class ic ON ic.oid = i.indexrelid
       JOIN pg_namespace n ON n.oid = ic.relnamespace
      WHERE n.nspname = $1 AND NOT i.indisunique AND NOT i.indisprimary AND i.indisvalid
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
      ORDER BY ic.relname`,
    [schema],
  );
  return rows as { name: string; definition: string }[];
}

/** `deferrableIndexes` of many schemas in one query. */
export async function deferrableIndexesOf(
  client: Queryable,
  schemas: readonly string[],
): Promise<{ schema: string; name: string; definition: string }[]> {
  const { rows } = await client.query(
    `SELECT n.nspname::text AS schema, ic.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i
       JOIN pg_class ic ON ic.oid = i.indexrelid
       JOIN pg_namespace n ON n.oid = ic.relnamespace
      WHERE n.nspname = ANY($1::text[]) AND NOT i.indisunique AND NOT i.indisprimary AND i.indisvalid
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
      ORDER BY n.nspname, ic.relname`,
    [schemas],
  );
  return rows as { schema: string; name: string; definition: string }[];
}

/** `buildDeferredIndexes` for many schemas: one query per side to find what is missing. */
export async function buildDeferredIndexesOf(
  source: Queryable,
  target: Queryable,
  schemas: readonly string[],
): Promise<number> {
  const wanted = await deferrableIndexesOf(source, schemas);
  if (wanted.length === 0) return 0;
  const present = new Set((await deferrableIndexesOf(target, schemas)).map((i) => `${i.schema}.${i.name}`));
  let built = 0;
  for (const index of wanted) {
    if (present.has(`${index.schema}.${index.name}`)) continue;
    await target.query(index.definition);
    built++;
  }
  return built;
}

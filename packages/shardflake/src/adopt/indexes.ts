import type pg from 'pg';
import { deferrableIndexesOf } from '../move/target-schema.js';
import { quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import { APPLIED_SCHEMA } from './apply.js';

/**
 * The shards' plain secondary indexes are built after the copy, not kept up row by row during it (as moves do,
 * move/target-schema.ts: several times faster). Their definitions are kept in `shardflake_adopt.deferred_indexes`
 * on each server, in the transaction that drops them, so a run killed during the copy still rebuilds them: the
 * next run finds them there.
 */
const TABLE = `${APPLIED_SCHEMA}.deferred_indexes`;

export async function deferIndexes(client: pg.ClientBase, schemas: readonly string[]): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${TABLE} (schema text NOT NULL, name text NOT NULL, definition text NOT NULL, PRIMARY KEY (schema, name))`,
    );
    const found = await deferrableIndexesOf(client, schemas);
    if (found.length > 0) {
      await client.query(
        `INSERT INTO ${TABLE} SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT DO NOTHING`,
        [found.map((i) => i.schema), found.map((i) => i.name), found.map((i) => i.definition)],
      );
      for (let i = 0; i < found.length; i += 500)
        await client.query(
          `DROP INDEX ${found
            .slice(i, i + 500)
            .map((x) => `${quoteIdent(x.schema)}.${quoteIdent(x.name)}`)
            .join(', ')}`,
        );
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

/** Builds every deferred index of this server (50 per round trip), forgetting each once built. */
export async function rebuildIndexes(client: pg.ClientBase): Promise<number> {
  const { rows: exists } = await client.query(`SELECT to_regclass('${TABLE}') IS NOT NULL AS ok`);
  if (!(exists[0] as { ok: boolean }).ok) return 0;
  const { rows } = await client.query(`SELECT schema, name, definition FROM ${TABLE} ORDER BY 1, 2`);
  const list = rows as { schema: string; name: string; definition: string }[];
  for (let i = 0; i < list.length; i += 50) {
    const part = list.slice(i, i + 50);
    await client.query(
      `${part.map((x) => x.definition.replace(/^CREATE (UNIQUE )?INDEX /, 'CREATE $1INDEX IF NOT EXISTS ')).join(';\n')};
       DELETE FROM ${TABLE} WHERE (schema, name) IN (${part.map((x) => `(${quoteLiteral(x.schema)}, ${quoteLiteral(x.name)})`).join(', ')})`,
    );
  }
  return list.length;
}

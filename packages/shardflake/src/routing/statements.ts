import { REFERENCE_SCHEMA } from '../config/reference.js';
import { quoteIdent } from '../postgres/identifier.js';

/**
 * The SQL text of routed statements, built once per (kind, schema, table, columns) and cached: building and quoting
 * the text again on every call would cost more than the rest of the routing. Every identifier goes through
 * `quoteIdent` (which validates it); values always travel as bind parameters.
 */
export class Statements {
  readonly #texts = new Map<string, string>();
  /** Which sharded tables have an `id` column (routing/bulk.ts asks the server once per table). */
  readonly #idColumns = new Map<string, boolean>();

  hasIdColumn(table: string): boolean | undefined {
    return this.#idColumns.get(table);
  }

  noteIdColumn(table: string, has: boolean): void {
    this.#idColumns.set(table, has);
  }

  #cached(key: string, build: () => string): string {
    let text = this.#texts.get(key);
    if (text === undefined) {
      text = build();
      this.#texts.set(key, text);
    }
    return text;
  }

  /**
   * Opens a shard session's transaction with the shard's schema first on the search_path, in one round trip.
   * `SET LOCAL` lasts until the transaction ends, so nothing is left on the pooled connection for its next user;
   * with no `public` in the path, a table missing from the shard is an error instead of a silent fall-back.
   * The two statements go as one simple-protocol message (no parameters: the schema name comes from the catalog
   * and is validated and quoted), which saves the round trip `SELECT set_config($1…)` would cost and also works
   * behind PgBouncer in transaction mode. pg_catalog is searched implicitly, so built-in functions still resolve.
   * The reference tables' schema comes after the shard's (reference/sql.ts): a reference table is found by its plain
   * name, and config.ts refuses a sharded table of the same name, which would hide it (`cluster verify` reports one
   * made by hand). A schema of the path that does not exist is skipped, so clusters without them are unchanged.
   */
  begin(schema: string, readOnly: boolean): string {
    return this.#cached(`b\0${schema}\0${readOnly}`, () => {
      const begin = readOnly ? 'BEGIN READ ONLY' : 'BEGIN';
      return `${begin}; SET LOCAL search_path TO ${shardSearchPath(schema)}`;
    });
  }

  insert(schema: string, table: string, columns: readonly string[]): string {
    return this.#cached(`i\0${schema}\0${table}\0${columns.join('\0')}`, () => {
      const target = `${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')}`;
      if (columns.length === 0) return `INSERT INTO ${target} DEFAULT VALUES RETURNING id`;
      const names = columns.map((c) => quoteIdent(c, 'column')).join(', ');
      const params = columns.map((_, i) => `$${i + 1}`).join(', ');
      return `INSERT INTO ${target} (${names}) VALUES (${params}) RETURNING id`;
    });
  }

  get(schema: string, table: string): string {
    return this.#cached(
      `g\0${schema}\0${table}`,
      () => `SELECT * FROM ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} WHERE id = $1`,
    );
  }

  update(schema: string, table: string, columns: readonly string[]): string {
    return this.#cached(`u\0${schema}\0${table}\0${columns.join('\0')}`, () => {
      const sets = columns.map((c, i) => `${quoteIdent(c, 'column')} = $${i + 2}`).join(', ');
      return `UPDATE ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} SET ${sets} WHERE id = $1`;
    });
  }

  delete(schema: string, table: string): string {
    return this.#cached(
      `d\0${schema}\0${table}`,
      () => `DELETE FROM ${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')} WHERE id = $1`,
    );
  }
}

/**
 * A shard session's search_path, quoted: the shard's schema, then the reference tables' (see Statements.begin).
 * Every kind of shard session uses it (withShard here, withShards' sessions in transactions/cross.ts).
 */
export function shardSearchPath(schema: string): string {
  return `${quoteIdent(schema, 'schema')}, ${quoteIdent(REFERENCE_SCHEMA, 'schema')}`;
}

/**
 * A multi-row INSERT of `rowCount` rows of `columns` into a shard's table, returning the ids in row order
 * (PostgreSQL inserts and returns VALUES rows in the order written). Not cached: bulk sizes vary.
 */
export function insertRowsSql(
  schema: string,
  table: string,
  columns: readonly string[],
  rowCount: number,
  returningId = true,
): string {
  const target = `${quoteIdent(schema, 'schema')}.${quoteIdent(table, 'table')}`;
  const names = columns.map((c) => quoteIdent(c, 'column')).join(', ');
  const tuples: string[] = [];
  for (let r = 0; r < rowCount; r++) {
    const base = r * columns.length;
    tuples.push(`(${columns.map((_, c) => `$${base + c + 1}`).join(', ')})`);
  }
  return `INSERT INTO ${target} (${names}) VALUES ${tuples.join(', ')}${returningId ? ' RETURNING id' : ''}`;
}

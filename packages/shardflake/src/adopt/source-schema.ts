import type { Queryable } from '../postgres/connect.js';

/**
 * What the source database declares, read from pg_catalog in one pass per kind (tables and columns, constraints,
 * indexes). Expressions are printed with the source's schema first on the search_path, so they come out
 * unqualified, as a shard's statements must be.
 */
export interface SourceColumn {
  name: string;
  /** format_type of the column: `bigint`, `character varying(40)`, … */
  type: string;
  /** The type lives in pg_catalog (a built-in type); a type of the source's own would not exist in a shard. */
  builtinType: boolean;
  notNull: boolean;
  /** The default's expression, or null. */
  default: string | null;
  /** The default calls a function or sequence of the source's own schema (nextval of a serial, a user function). */
  defaultUsesSourceObjects: boolean;
  /** Identity column (`a` always, `d` by default) or ''. */
  identity: string;
  /** Generated column (`s` stored) or ''. */
  generated: string;
  integer: boolean;
}

export interface SourceConstraint {
  name: string;
  /** p primary key, u unique, c check, f foreign key. */
  kind: 'p' | 'u' | 'c' | 'f';
  columns: string[];
  definition: string;
  /** Foreign keys: the table they point at, and its columns. */
  references?: { table: string; schema: string; columns: string[] };
}

export interface SourceIndex {
  name: string;
  definition: string;
  unique: boolean;
  /** Plain column list (no expression, no predicate): the columns; otherwise null. */
  columns: string[] | null;
  /** The index backs a constraint (primary key, unique): it comes with the constraint. */
  constraint: boolean;
}

export interface SourceTable {
  name: string;
  columns: SourceColumn[];
  constraints: SourceConstraint[];
  indexes: SourceIndex[];
  primaryKey: string[] | null;
  /** pg_class.reltuples, or -1 when never analyzed. */
  estimate: bigint;
  partitioned: boolean;
}

const INTEGER_TYPES = ['smallint', 'integer', 'bigint'];

export async function readSourceSchema(client: Queryable, schema: string): Promise<SourceTable[]> {
  // Expressions below are printed for this search path: objects of the source's schema come out unqualified.
  await client.query(`SELECT set_config('search_path', $1, false)`, [
    `"${schema.replace(/"/g, '""')}", pg_catalog`,
  ]);
  const { rows: tableRows } = await client.query(
    `SELECT c.oid, c.relname::text AS name, c.reltuples::bigint AS estimate, c.relkind = 'p' AS partitioned
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      ORDER BY c.relname`,
    [schema],
  );
  const { rows: columnRows } = await client.query(
    `SELECT a.attrelid AS oid, a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type,
            tn.nspname IN ('pg_catalog', 'information_schema') AS builtin, a.attnotnull AS not_null,
            pg_get_expr(d.adbin, d.adrelid) AS default, a.attidentity::text AS identity,
            a.attgenerated::text AS generated,
            EXISTS (SELECT 1 FROM pg_depend dep
                      LEFT JOIN pg_proc p ON dep.refclassid = 'pg_proc'::regclass AND p.oid = dep.refobjid
                      LEFT JOIN pg_class s ON dep.refclassid = 'pg_class'::regclass AND s.oid = dep.refobjid
                                           AND s.relkind = 'S'
                     WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                       AND (p.oid IS NOT NULL OR s.oid IS NOT NULL)
                       AND coalesce(p.pronamespace, s.relnamespace) NOT IN
                           (SELECT oid FROM pg_namespace WHERE nspname IN ('pg_catalog', 'information_schema'))
                   ) AS uses_source
       FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_type t ON t.oid = a.atttypid JOIN pg_namespace tn ON tn.oid = t.typnamespace
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
      ORDER BY a.attrelid, a.attnum`,
    [schema],
  );
  const { rows: constraintRows } = await client.query(
    `SELECT k.conrelid AS oid, k.conname::text AS name, k.contype::text AS kind,
            array(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
                    JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.i) AS columns,
            pg_get_constraintdef(k.oid) AS definition,
            rc.relname::text AS ref_table, rn.nspname::text AS ref_schema,
            array(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
                    JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.i) AS ref_columns
       FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       LEFT JOIN pg_class rc ON rc.oid = k.confrelid LEFT JOIN pg_namespace rn ON rn.oid = rc.relnamespace
      WHERE n.nspname = $1 AND k.contype IN ('p', 'u', 'c', 'f')
      ORDER BY k.conrelid, k.contype, k.conname`,
    [schema],
  );
  const { rows: indexRows } = await client.query(
    `SELECT i.indrelid AS oid, ic.relname::text AS name, pg_get_indexdef(i.indexrelid) AS definition,
            i.indisunique AS unique,
            CASE WHEN i.indexprs IS NULL AND i.indpred IS NULL THEN
              array(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY u(n, k)
                      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = u.n ORDER BY u.k) END AS columns,
            EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.contype IN ('p', 'u', 'x'))
              AS constraint
       FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class c ON c.oid = i.indrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 ORDER BY i.indrelid, ic.relname`,
    [schema],
  );
  return (tableRows as { oid: number; name: string; estimate: bigint; partitioned: boolean }[]).map((t) => {
    const columns = (columnRows as Record<string, unknown>[])
      .filter((c) => c.oid === t.oid)
      .map((c) => ({
        name: c.name as string,
        type: c.type as string,
        builtinType: c.builtin as boolean,
        notNull: c.not_null as boolean,
        default: (c.default as string | null) ?? null,
        defaultUsesSourceObjects: c.uses_source as boolean,
        identity: c.identity as string,
        generated: c.generated as string,
        integer: INTEGER_TYPES.includes(c.type as string),
      }));
    const constraints = (constraintRows as Record<string, unknown>[])
      .filter((k) => k.oid === t.oid)
      .map((k) => ({
        name: k.name as string,
        kind: k.kind as SourceConstraint['kind'],
        columns: k.columns as string[],
        definition: k.definition as string,
        ...(k.kind === 'f'
          ? {
              references: {
                table: k.ref_table as string,
                schema: k.ref_schema as string,
                columns: k.ref_columns as string[],
              },
            }
          : {}),
      }));
    const indexes = (indexRows as Record<string, unknown>[])
      .filter((i) => i.oid === t.oid)
      .map((i) => ({
        name: i.name as string,
        definition: i.definition as string,
        unique: i.unique as boolean,
        columns: (i.columns as string[] | null) ?? null,
        constraint: i.constraint as boolean,
      }));
    return {
      name: t.name,
      columns,
      constraints,
      indexes,
      primaryKey: constraints.find((k) => k.kind === 'p')?.columns ?? null,
      estimate: BigInt(t.estimate),
      partitioned: t.partitioned,
    };
  });
}

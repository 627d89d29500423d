import { ShardflakeError } from '../errors/errors.js';
import { loadPgParser } from '../postgres/parser.js';

/**
 * `router.withReference` runs each statement on every server's copy. A value the statement computes on the server
 * (now(), random(), a sequence's nextval, the transaction id) is computed once per server and differs between them,
 * so the copies would silently differ until `cluster verify` looked (issue 32, item 4). Such statements are
 * refused before they run anywhere, with REFERENCE_NOT_DETERMINISTIC naming the function; the application
 * computes the value once and passes it as a parameter (`VALUES ($1)` with `new Date()`), which every copy then
 * gets alike. Computing them once inside shardflake was the other choice; it would mean rewriting the statement
 * (and `random()` per row is not one value), so the refusal is the honest one.
 *
 * What is refused, found in PostgreSQL's own parse tree (libpg-query, postgres/parser.ts):
 * - a call of a function PostgreSQL marks VOLATILE (pg_proc.provolatile = 'v', asked of the first server for every
 *   name called: random, clock_timestamp, gen_random_uuid, nextval, setval, timeofday, a volatile function of the
 *   application's own …);
 * - a call of a STABLE function whose value is the server's or the transaction's own (SERVER_FUNCTIONS: now,
 *   transaction_timestamp, txid_current, pg_current_xact_id, pg_backend_pid, current_setting, …) and the
 *   SQL keywords of the clock (CURRENT_TIMESTAMP, CURRENT_DATE, LOCALTIME, …);
 * - the same in the default of a column an INSERT leaves to its default (omitted, or DEFAULT) or an UPDATE sets
 *   to DEFAULT (`created_at timestamptz DEFAULT now()`). A sequence default (serial, identity) is allowed: every
 *   copy's sequence is created, copied and advanced together, statement by statement.
 * Every statement is checked, reads too (only the first server's result is returned, and a read may call a
 * function with effects).
 *
 * Without libpg-query installed, withReference is refused with MISSING_PACKAGE (install it), rather than writing
 * unchecked: a check that silently does nothing when a package is missing is the drift this prevents.
 */

/** Stable functions whose value is the server's or the transaction's own, not the data's. */
const SERVER_FUNCTIONS = new Set([
  'now',
  'transaction_timestamp',
  'statement_timestamp',
  'txid_current',
  'txid_current_if_assigned',
  'txid_current_snapshot',
  'pg_current_xact_id',
  'pg_current_xact_id_if_assigned',
  'pg_current_snapshot',
  'pg_backend_pid',
  'pg_postmaster_start_time',
  'pg_conf_load_time',
  'pg_current_wal_lsn',
  'pg_current_wal_insert_lsn',
  'pg_current_wal_flush_lsn',
  'inet_server_addr',
  'inet_server_port',
  'inet_client_addr',
  'inet_client_port',
  'current_database',
  'current_setting',
  'version',
]);

/** The SQL keywords of the clock and the database (SQLValueFunction ops) and how the message names them. */
const SERVER_KEYWORDS: Record<string, string> = {
  SVFOP_CURRENT_DATE: 'CURRENT_DATE',
  SVFOP_CURRENT_TIME: 'CURRENT_TIME',
  SVFOP_CURRENT_TIME_N: 'CURRENT_TIME',
  SVFOP_CURRENT_TIMESTAMP: 'CURRENT_TIMESTAMP',
  SVFOP_CURRENT_TIMESTAMP_N: 'CURRENT_TIMESTAMP',
  SVFOP_LOCALTIME: 'LOCALTIME',
  SVFOP_LOCALTIME_N: 'LOCALTIME',
  SVFOP_LOCALTIMESTAMP: 'LOCALTIMESTAMP',
  SVFOP_LOCALTIMESTAMP_N: 'LOCALTIMESTAMP',
  SVFOP_CURRENT_CATALOG: 'CURRENT_CATALOG',
};

/** Sequence defaults (serial, identity) advance together on every copy: allowed in defaults only. */
const SEQUENCE_DEFAULT = 'nextval';

/** What a parse tree calls: function names (as written, lowercased unless quoted) and clock keywords. */
interface Calls {
  functions: Set<string>;
  keywords: Set<string>;
}

type Tree = unknown;

function walk(node: Tree, visit: (key: string, value: Record<string, unknown>) => void): void {
  if (Array.isArray(node)) {
    for (const item of node) walk(item, visit);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  for (const [key, value] of Object.entries(node)) {
    if (value !== null && typeof value === 'object' && !Array.isArray(value))
      visit(key, value as Record<string, unknown>);
    walk(value, visit);
  }
}

function callsIn(tree: Tree): Calls {
  const calls: Calls = { functions: new Set(), keywords: new Set() };
  walk(tree, (key, value) => {
    if (key === 'FuncCall') {
      const parts = (value.funcname as { String?: { sval?: string } }[] | undefined) ?? [];
      const name = parts.at(-1)?.String?.sval;
      if (name) calls.functions.add(name);
    } else if (key === 'SQLValueFunction') {
      const keyword = SERVER_KEYWORDS[String(value.op)];
      if (keyword) calls.keywords.add(keyword);
    }
  });
  return calls;
}

/**
 * Which columns of a table an INSERT or UPDATE leaves to their defaults: every one (`DEFAULT VALUES`), the ones
 * named (`SET c = DEFAULT`, a `DEFAULT` in a row) and every one outside the INSERT's column list, or by position for
 * an INSERT without a column list (a row gives the first `given` columns).
 */
type Defaulted =
  | { kind: 'all' }
  | { kind: 'named'; names: Set<string>; listed?: Set<string> }
  | { kind: 'positions'; given: number; defaults: Set<number> };

interface DefaultedColumns {
  schema: string | null;
  table: string;
  columns: Defaulted;
}

const isDefault = (node: unknown) =>
  node !== null && typeof node === 'object' && 'SetToDefault' in (node as object);

/** Names of the targets set to DEFAULT in an UPDATE's (or ON CONFLICT's) SET list. */
function setToDefault(targets: unknown): Set<string> {
  const names = new Set<string>();
  for (const t of (targets as { ResTarget?: { name?: string; val?: unknown } }[] | undefined) ?? [])
    if (t.ResTarget?.name && isDefault(t.ResTarget.val)) names.add(t.ResTarget.name);
  return names;
}

/** The columns of each INSERT and UPDATE in the statement that take their default. */
function defaultedColumns(tree: Tree): DefaultedColumns[] {
  const found: DefaultedColumns[] = [];
  walk(tree, (key, stmt) => {
    if (key !== 'InsertStmt' && key !== 'UpdateStmt') return;
    const relation = stmt.relation as { schemaname?: string; relname?: string } | undefined;
    if (!relation?.relname) return;
    const on = (columns: Defaulted) =>
      found.push({ schema: relation.schemaname ?? null, table: relation.relname as string, columns });
    if (key === 'UpdateStmt') return on({ kind: 'named', names: setToDefault(stmt.targetList) });
    const conflict = stmt.onConflictClause as { targetList?: unknown } | undefined;
    if (conflict) on({ kind: 'named', names: setToDefault(conflict.targetList) });
    if (!stmt.selectStmt) return on({ kind: 'all' });
    const values =
      (stmt.selectStmt as { SelectStmt?: { valuesLists?: { List?: { items?: unknown[] } }[] } }).SelectStmt
        ?.valuesLists ?? [];
    const rows = values.map((l) => l.List?.items ?? []);
    const defaultAt = new Set<number>();
    for (const row of rows) for (const [i, item] of row.entries()) if (isDefault(item)) defaultAt.add(i);
    const cols = ((stmt.cols as { ResTarget?: { name?: string } }[] | undefined) ?? []).map(
      (c) => c.ResTarget?.name ?? '',
    );
    if (cols.length > 0)
      return on({
        kind: 'named',
        names: new Set([...defaultAt].map((i) => cols[i] ?? '')),
        listed: new Set(cols),
      });
    // An INSERT … SELECT without a column list fills as many columns as it selects; assume all (no default taken).
    const given = rows.length > 0 ? Math.min(...rows.map((r) => r.length)) : Number.POSITIVE_INFINITY;
    on({ kind: 'positions', given, defaults: defaultAt });
  });
  return found;
}

function takesDefault(columns: Defaulted, name: string, position: number): boolean {
  if (columns.kind === 'all') return true;
  if (columns.kind === 'named')
    return columns.names.has(name) || (columns.listed !== undefined && !columns.listed.has(name));
  return position >= columns.given || columns.defaults.has(position);
}

/**
 * The default expression of each column of a table (by position), read on the server; none for an identity column
 * (a sequence) or a generated one (PostgreSQL requires it to be immutable).
 */
const DEFAULTS_SQL = `SELECT a.attname AS name,
       CASE WHEN a.attidentity = '' AND a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END AS expr
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = to_regclass(CASE WHEN $1::text IS NULL THEN format('%I', $2::text)
                                     ELSE format('%I.%I', $1::text, $2::text) END)
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum`;

/** The functions PostgreSQL marks volatile, of those named (any overload by that name counts). */
const VOLATILE_SQL = `SELECT DISTINCT proname AS name FROM pg_proc WHERE proname = ANY($1::text[]) AND provolatile = 'v'`;

/**
 * Refuses `text` with REFERENCE_NOT_DETERMINISTIC when a value it computes (or a default it leaves to the server)
 * would differ between servers; `client` is a connection to the first server, inside the write's transaction.
 */
export async function refuseServerValues(
  client: { query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }> },
  text: string,
): Promise<void> {
  const parser = await loadPgParser(
    'router.withReference (it checks each statement with PostgreSQL’s parser)',
    'libpg-query@18',
  );
  let tree: Tree;
  try {
    tree = await parser.parse(text);
  } catch {
    return; // not SQL PostgreSQL would run either: the server says why, on the first copy, and nothing commits
  }
  const calls = callsIn(tree);
  const defaults: { where: string; calls: Calls }[] = [];
  for (const d of defaultedColumns(tree)) {
    const { rows } = await client.query(DEFAULTS_SQL, [d.schema, d.table]);
    const columns = rows as { name: string; expr: string | null }[];
    for (const [i, column] of columns.entries()) {
      if (column.expr === null || !takesDefault(d.columns, column.name, i)) continue;
      const inDefault = callsIn(await parser.parse(`SELECT ${column.expr}`));
      inDefault.functions.delete(SEQUENCE_DEFAULT);
      defaults.push({ where: `the default of column ${d.table}.${column.name}`, calls: inDefault });
    }
  }
  const named = [...calls.functions, ...defaults.flatMap((d) => [...d.calls.functions])];
  const volatile = new Set(
    named.length === 0
      ? []
      : ((await client.query(VOLATILE_SQL, [[...new Set(named)]])).rows as { name: string }[]).map(
          (r) => r.name,
        ),
  );
  const offending = (c: Calls) =>
    [...c.functions].find((f) => volatile.has(f) || SERVER_FUNCTIONS.has(f))?.concat('()') ??
    [...c.keywords][0];
  const inStatement = offending(calls);
  if (inStatement) throw refusal(inStatement, 'the statement calls it');
  for (const d of defaults) {
    const inDefault = offending(d.calls);
    if (inDefault) throw refusal(inDefault, `${d.where} calls it; give that column a value`);
  }
}

function refusal(what: string, where: string): ShardflakeError {
  return new ShardflakeError(
    'REFERENCE_NOT_DETERMINISTIC',
    `withReference refuses ${what}: its value differs per server, so the reference copies would differ (${where}); compute the value once in the application and pass it as a parameter; nothing was run (docs/reference-tables.md)`,
  );
}

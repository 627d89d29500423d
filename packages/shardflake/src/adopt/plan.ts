import { MAX_LOOKUP_NAME } from '../config/lookups.js';
import { ShardflakeError } from '../errors/errors.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { quoteIdent } from '../postgres/identifier.js';
import { readSourceSchema, type SourceColumn, type SourceTable } from './source-schema.js';

/**
 * `cluster adopt plan`: from the source's own definitions, a cluster config that `adopt run` takes. It reads
 * pg_catalog and writes nothing anywhere.
 *
 * Placement. The root is placed by its own id: old id n lives in shard n mod logicalShards (the rule of an
 * integer shard key, so `{ key: n }` and `{ id: n }` agree for an old root id). Every other table is placed
 * beside its parent row: a NOT NULL single-column foreign key to a placed table's primary key, the parent nearest
 * the root winning (breadth first from the root). Several hops are allowed: comments → photos → users puts a
 * comment in its photo's shard, which is its user's.
 *
 * What changes in the templates, each said in a note: an integer serial or identity primary key becomes
 * `bigint … DEFAULT next_id()`, and every column pointing at one becomes bigint (new ids need 64 bits); a unique
 * constraint that holds the placement column stays (all rows it compares live in one shard); one without it on a
 * single column becomes a unique lookup (unique across the cluster); any other becomes nothing (named); a foreign
 * key other than the placement one cannot hold inside one shard and is dropped (named); defaults that call the
 * source's own functions or sequences are dropped (named).
 */
export interface PlanOptions {
  from: string;
  root: string;
  servers: Record<string, string>;
  catalog?: string;
  logicalShards?: number;
  reference?: readonly string[];
  /** The source's schema (default public). */
  schema?: string;
  /** Written into the config as `adopt.from` (default `from`): e.g. the URL with its password as a `${VAR}`. */
  fromAsWritten?: string;
  serversAsWritten?: Record<string, string>;
}

export interface AdoptPlan {
  /** The config file's JSON, as `adopt run --config` takes it. */
  config: Record<string, unknown>;
  /** What the plan changed or dropped on the way, one sentence each. */
  notes: string[];
}

export const DEFAULT_ADOPT_SHARDS = 2048;

interface Placement {
  column: string;
  parent?: string;
  depth: number;
}

const ID_DEFAULT = 'next_id()';

function isSerialDefault(c: SourceColumn): boolean {
  return c.identity !== '' || (c.default !== null && /^nextval\(/.test(c.default));
}

/** Each table's placement, breadth first from the root; tables left out have no usable path. */
function place(
  tables: ReadonlyMap<string, SourceTable>,
  root: string,
  reference: ReadonlySet<string>,
  schema: string,
): Map<string, Placement> {
  const rootTable = tables.get(root) as SourceTable;
  const placed = new Map<string, Placement>([
    [root, { column: rootTable.primaryKey?.[0] as string, depth: 0 }],
  ]);
  for (let changed = true; changed; ) {
    changed = false;
    let best: { table: string; placement: Placement } | undefined;
    for (const t of tables.values()) {
      if (placed.has(t.name) || reference.has(t.name)) continue;
      for (const fk of t.constraints.filter((k) => k.kind === 'f')) {
        const ref = fk.references;
        const parent = ref && ref.schema === schema ? placed.get(ref.table) : undefined;
        const parentPk = ref ? tables.get(ref.table)?.primaryKey : undefined;
        if (!ref || !parent || fk.columns.length !== 1 || parentPk?.length !== 1) continue;
        if (ref.columns[0] !== parentPk[0]) continue;
        const column = t.columns.find((c) => c.name === fk.columns[0]);
        if (!column?.notNull) continue;
        const candidate = { column: column.name, parent: ref.table, depth: parent.depth + 1 };
        // Nearest the root first; then a column of the primary key (follows(follower_id, followee_id) goes by
        // follower_id), in key order, then the column order of the table.
        const rank = (table: SourceTable, c: string) => {
          const inKey = table.primaryKey?.indexOf(c) ?? -1;
          return inKey === -1 ? 100 + table.columns.findIndex((x) => x.name === c) : inKey;
        };
        if (
          !best ||
          candidate.depth < best.placement.depth ||
          (best.table === t.name &&
            candidate.depth === best.placement.depth &&
            rank(t, candidate.column) < rank(t, best.placement.column))
        )
          best = { table: t.name, placement: candidate };
      }
    }
    if (best) {
      placed.set(best.table, best.placement);
      changed = true;
    }
  }
  return placed;
}

/** Why a table has no placement, for the refusal: a nullable foreign key to a placed table, or none at all. */
function whyUnplaced(t: SourceTable, placed: ReadonlyMap<string, Placement>, root: string): string {
  const nullable = t.constraints.find(
    (k) =>
      k.kind === 'f' &&
      k.references &&
      placed.has(k.references.table) &&
      k.columns.length === 1 &&
      !t.columns.find((c) => c.name === k.columns[0])?.notNull,
  );
  if (nullable)
    return `table ${t.name}: its foreign key ${t.name}.${nullable.columns[0]} → ${nullable.references?.table} may be null, and a row without a parent has no shard; make the column NOT NULL, or list ${t.name} in --reference`;
  return `table ${t.name} has no foreign-key path to ${root}: give it a NOT NULL foreign key to ${root} or a table placed beside it, or list it in --reference (a small table copied to every server)`;
}

function columnSql(c: SourceColumn, asId: boolean, widened: boolean): string {
  const type = asId || widened ? 'bigint' : c.type;
  const parts = [quoteIdent(c.name), type];
  if (c.notNull) parts.push('NOT NULL');
  if (asId) parts.push(`DEFAULT ${ID_DEFAULT}`);
  else if (c.default !== null && !c.defaultUsesSourceObjects && c.identity === '')
    parts.push(`DEFAULT ${c.default}`);
  return parts.join(' ');
}

/** An index definition as a shard's statement: the source's schema taken out of the table's name. */
function indexSql(definition: string, schema: string): string {
  const qualifiedPrefix = new RegExp(`ON (ONLY )?(${schema}|"${schema.replace(/"/g, '""')}")\\.`);
  return definition.replace(qualifiedPrefix, 'ON ');
}

export async function planAdoption(options: PlanOptions): Promise<AdoptPlan> {
  const schema = options.schema ?? 'public';
  const logicalShards = options.logicalShards ?? DEFAULT_ADOPT_SHARDS;
  const referenceList = [...(options.reference ?? [])];
  const servers = Object.keys(options.servers);
  if (servers.length === 0)
    throw new ShardflakeError('INVALID_ARGUMENT', 'adopt plan needs at least one server');
  const catalog = options.catalog ?? (servers[0] as string);
  if (!servers.includes(catalog))
    throw new ShardflakeError(
      'UNKNOWN_SERVER',
      `--catalog ${catalog} is not one of --servers (${servers.join(', ')})`,
    );
  const client = await connect(options.from, { applicationName: 'shardflake adopt plan' });
  let source: SourceTable[];
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    source = await readSourceSchema(client, schema);
    await client.query('COMMIT');
  } catch (error) {
    throw wrapPgError(error);
  } finally {
    await client.end().catch(() => {});
  }
  const tables = new Map(source.map((t) => [t.name, t]));
  const refusals: string[] = [];
  const notes: string[] = [];
  const root = tables.get(options.root);
  if (!root) {
    throw new ShardflakeError(
      'ADOPT_REFUSED',
      `the source has no table ${options.root} in schema ${schema} (tables: ${[...tables.keys()].join(', ') || 'none'})`,
    );
  }
  const rootPk = root.primaryKey;
  if (rootPk?.length !== 1 || !root.columns.find((c) => c.name === rootPk[0])?.integer) {
    throw new ShardflakeError(
      'ADOPT_REFUSED',
      `the root table ${root.name} needs a primary key of one integer column (its ids place its rows), not ${rootPk ? `(${rootPk.join(', ')})` : 'none'}`,
    );
  }
  for (const name of referenceList) {
    if (!tables.has(name))
      refusals.push(`--reference ${name}: the source has no table ${name} in schema ${schema}`);
    if (name === root.name) refusals.push(`--reference ${name}: the root table cannot be a reference table`);
  }
  const reference = new Set(referenceList);
  const placed = place(tables, root.name, reference, schema);
  for (const t of tables.values()) {
    if (!t.primaryKey) {
      refusals.push(
        `table ${t.name} has no primary key: its updates and deletes cannot be replayed; add one (ALTER TABLE ${t.name} ADD PRIMARY KEY …)`,
      );
      continue;
    }
    if (t.partitioned) refusals.push(`table ${t.name} is partitioned; adopt takes plain tables`);
    const foreign = t.columns.filter((c) => !c.builtinType);
    if (foreign.length > 0)
      refusals.push(
        `table ${t.name}: column ${foreign.map((c) => `${c.name} (${c.type})`).join(', ')} has a type of the source's own; adopt takes built-in types (use text or a CHECK)`,
      );
    const generated = t.columns.filter((c) => c.generated !== '');
    if (generated.length > 0)
      refusals.push(
        `table ${t.name}: generated column ${generated.map((c) => c.name).join(', ')} is not supported; drop the GENERATED clause first`,
      );
    if (reference.has(t.name)) continue;
    const p = placed.get(t.name);
    if (!p) {
      refusals.push(whyUnplaced(t, placed, root.name));
      continue;
    }
    const pk = t.primaryKey;
    const oneIntegerPk = pk.length === 1 && t.columns.find((c) => c.name === pk[0])?.integer === true;
    if (!oneIntegerPk && !pk.includes(p.column))
      refusals.push(
        `table ${t.name}: its primary key (${pk.join(', ')}) must be one integer column or hold its placement column ${p.column}, so that a change to a row finds the row's shard`,
      );
  }
  if (refusals.length > 0) {
    throw new ShardflakeError(
      'ADOPT_REFUSED',
      `adopt plan cannot place every table: ${refusals.join('; ')}`,
      {
        detail: refusals.join('\n'),
      },
    );
  }

  // Ids that become next_id(): integer serial or identity primary keys; the columns pointing at them widen.
  const idColumns = new Set<string>();
  for (const t of tables.values()) {
    const pk = t.primaryKey as string[];
    const c = pk.length === 1 ? t.columns.find((x) => x.name === pk[0]) : undefined;
    if (c?.integer && isSerialDefault(c) && !reference.has(t.name)) idColumns.add(`${t.name}.${c.name}`);
  }
  const widened = new Set<string>();
  for (const t of tables.values()) {
    for (const fk of t.constraints.filter((k) => k.kind === 'f' && k.references)) {
      const ref = fk.references as { table: string; columns: string[] };
      fk.columns.forEach((col, i) => {
        if (idColumns.has(`${ref.table}.${ref.columns[i]}`)) widened.add(`${t.name}.${col}`);
      });
    }
  }

  const tablesOut: Record<string, string[]> = {};
  const referenceOut: Record<string, string[]> = {};
  const lookups: Record<string, { table: string; column: string; unique: boolean }> = {};
  const ordered = [...placed.entries()].sort((a, b) => a[1].depth - b[1].depth).map(([name]) => name);
  for (const name of [...ordered, ...referenceList]) {
    const t = tables.get(name) as SourceTable;
    const isReference = reference.has(name);
    const p = placed.get(name);
    const lines: string[] = [];
    // A lookup finds rows by their integer `id` (lookups/): a table without one keeps no lookup.
    const hasId = t.columns.some((c) => c.name === 'id' && c.integer);
    for (const c of t.columns) {
      const asId = idColumns.has(`${name}.${c.name}`);
      const widen = widened.has(`${name}.${c.name}`) && c.type !== 'bigint';
      if (asId) {
        notes.push(
          `${name}.${c.name}: ${c.type === 'bigint' ? '' : `${c.type} becomes bigint, `}its ${c.identity ? 'identity' : 'serial'} default becomes next_id() (new rows get ids that carry their shard)`,
        );
      } else if (widen)
        notes.push(`${name}.${c.name}: ${c.type} becomes bigint (it holds ids, which new rows make 64-bit)`);
      else if (c.default !== null && (c.defaultUsesSourceObjects || c.identity !== ''))
        notes.push(
          `${name}.${c.name}: its default ${c.default} is dropped (it uses the source's own objects)`,
        );
      else if (c.identity !== '') notes.push(`${name}.${c.name}: its identity is dropped`);
      lines.push(columnSql(c, asId, widen));
    }
    lines.push(`PRIMARY KEY (${(t.primaryKey as string[]).map((c) => quoteIdent(c)).join(', ')})`);
    for (const k of t.constraints) {
      if (k.kind === 'c') lines.push(`CONSTRAINT ${quoteIdent(k.name)} ${k.definition}`);
      if (k.kind === 'u') {
        const holds = isReference || (p !== undefined && k.columns.includes(p.column));
        if (holds) lines.push(`CONSTRAINT ${quoteIdent(k.name)} ${k.definition}`);
        else if (k.columns.length === 1 && hasId) {
          const lookup = `${name}_${k.columns[0]}`.slice(0, MAX_LOOKUP_NAME);
          lookups[lookup] = { table: name, column: k.columns[0] as string, unique: true };
          notes.push(
            `${name}: unique ${k.columns[0]} becomes the unique lookup ${lookup} (unique across the cluster)`,
          );
        } else
          notes.push(
            `${name}: unique constraint ${k.name} (${k.columns.join(', ')}) is dropped: it lacks the placement column ${p?.column}, so its rows may be in different shards`,
          );
      }
      if (k.kind === 'f') {
        const ref = k.references as { table: string; schema: string };
        const placementFk = p?.parent === ref.table && k.columns.length === 1 && k.columns[0] === p.column;
        const bothReference = isReference && reference.has(ref.table) && ref.schema === schema;
        if (placementFk || bothReference) lines.push(`CONSTRAINT ${quoteIdent(k.name)} ${k.definition}`);
        else
          notes.push(
            `${name}: foreign key ${k.name} (${k.columns.join(', ')} → ${ref.table}) is dropped: ${reference.has(ref.table) ? 'reference tables live in a schema of their own' : 'the rows it joins may be in different shards'}`,
          );
      }
    }
    const statements = [`CREATE TABLE ${quoteIdent(name)} (\n  ${lines.join(',\n  ')}\n)`];
    for (const index of t.indexes.filter((i) => !i.constraint)) {
      if (index.unique) {
        const holds = isReference || (p !== undefined && index.columns?.includes(p.column) === true);
        if (holds) statements.push(indexSql(index.definition, schema));
        else if (
          index.columns?.length === 1 &&
          hasId &&
          !Object.values(lookups).some((l) => l.table === name && l.column === index.columns?.[0])
        ) {
          const lookup = `${name}_${index.columns[0]}`.slice(0, MAX_LOOKUP_NAME);
          lookups[lookup] = { table: name, column: index.columns[0] as string, unique: true };
          notes.push(
            `${name}: unique index ${index.name} becomes the unique lookup ${lookup} (unique across the cluster)`,
          );
        } else if (index.columns?.length !== 1 || !hasId)
          notes.push(`${name}: unique index ${index.name} is dropped: it cannot hold across shards`);
      } else statements.push(indexSql(index.definition, schema));
    }
    (isReference ? referenceOut : tablesOut)[name] = statements;
  }
  const placeOut: Record<string, { column: string; parent?: string }> = {};
  for (const name of ordered) {
    const p = placed.get(name) as Placement;
    placeOut[name] = p.parent === undefined ? { column: p.column } : { column: p.column, parent: p.parent };
  }
  const config: Record<string, unknown> = {
    servers: options.serversAsWritten ?? options.servers,
    catalog,
    logicalShards,
    tables: tablesOut,
    ...(referenceList.length > 0 ? { referenceTables: referenceOut } : {}),
    ...(Object.keys(lookups).length > 0 ? { lookups } : {}),
    adopt: {
      from: options.fromAsWritten ?? options.from,
      ...(schema === 'public' ? {} : { schema }),
      root: root.name,
      place: placeOut,
      ...(referenceList.length > 0 ? { reference: referenceList } : {}),
    },
  };
  return { config, notes };
}

import type { Queryable } from '../postgres/connect.js';
import { GENERATOR_OBJECTS } from '../postgres/generator-sql.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { ensureGeneratorAbove, lastIssuedId } from '../postgres/install.js';
import type { SourceTable } from './tables.js';

/**
 * Sequence state does not travel with logical replication, so the move carries the generator across itself:
 * the floor is the highest id the source issued (its generator's own record) or stored (the largest single-column
 * bigint primary key of each table, in case a row's id came from elsewhere), and the target's generator is raised
 * above it. Ids keep their shard bits (the target schema was created for the same shard) and keep increasing
 * across the cutover even when the target's clock is behind the source's.
 */
export async function idFloor(
  source: Queryable,
  schema: string,
  tables: readonly SourceTable[],
): Promise<bigint> {
  let floor = (await lastIssuedId(source, schema)) ?? 0n;
  const keyed = tables.filter(
    (t) => t.primaryKey.length === 1 && /^bigint\b/.test(shapeOf(t, t.primaryKey[0] as string)),
  );
  if (keyed.length > 0) {
    const { rows } = await source.query(
      `SELECT greatest(${keyed.map((t) => `(SELECT max(${quoteIdent(t.primaryKey[0] as string, 'column')}) FROM ${qualified(schema, t.name)})`).join(', ')})::bigint AS m`,
    );
    const m = (rows[0] as { m: bigint | null }).m;
    if (m !== null && BigInt(m) > floor) floor = BigInt(m);
  }
  return floor;
}

function shapeOf(table: SourceTable, column: string): string {
  const part = table.shape.split(', ').find((c) => c.startsWith(`${column} `));
  return part ? part.slice(column.length + 1) : '';
}

export async function moveGeneratorState(
  source: Queryable,
  target: Queryable,
  schema: string,
  tables: readonly SourceTable[],
): Promise<bigint> {
  const floor = await idFloor(source, schema, tables);
  if (floor > 0n) await ensureGeneratorAbove(target, schema, floor);
  return floor;
}

/**
 * The same for a cutover group, in one round trip per side: one SELECT on the source gives each schema's floor,
 * one SELECT on the target raises each generator above it. Falls back to one shard at a time when a shard's
 * generator predates the helper functions (the per-shard path names the problem).
 */
export async function moveGeneratorStates(
  source: Queryable,
  target: Queryable,
  shards: readonly { schema: string; tables: readonly SourceTable[] }[],
): Promise<void> {
  if (shards.length === 0) return;
  const floorSql = shards
    .map(({ schema, tables }, i) => {
      const keyed = tables.filter(
        (t) => t.primaryKey.length === 1 && /^bigint\b/.test(shapeOf(t, t.primaryKey[0] as string)),
      );
      const parts = [
        `${qualified(schema, GENERATOR_OBJECTS.lastIssued)}()`,
        ...keyed.map(
          (t) =>
            `(SELECT max(${quoteIdent(t.primaryKey[0] as string, 'column')}) FROM ${qualified(schema, t.name)})`,
        ),
      ];
      return `SELECT ${i} AS i, greatest(${parts.join(', ')})::text AS floor`;
    })
    .join(' UNION ALL ');
  let floors: { i: number; floor: string | null }[];
  try {
    await source.query('SAVEPOINT sf_floor');
    floors = (await source.query(floorSql)).rows as { i: number; floor: string | null }[];
    await source.query('RELEASE SAVEPOINT sf_floor');
  } catch {
    await source.query('ROLLBACK TO SAVEPOINT sf_floor');
    for (const { schema, tables } of shards) await moveGeneratorState(source, target, schema, tables);
    return;
  }
  const raise = floors.filter((f) => f.floor !== null && BigInt(f.floor) > 0n);
  if (raise.length === 0) return;
  await target.query(
    `SELECT ${raise.map((f, k) => `${qualified((shards[f.i] as { schema: string }).schema, GENERATOR_OBJECTS.catchUp)}($${k + 1}::bigint)`).join(', ')}`,
    raise.map((f) => f.floor),
  );
}

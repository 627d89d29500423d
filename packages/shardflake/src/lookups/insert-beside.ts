import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import type { LookupDefinition } from '../config/lookups.js';
import { ShardflakeError } from '../errors/errors.js';
import { BatchFailure, type BatchStatement, queryBatch } from '../postgres/batch.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import type { RouterContext } from '../routing/context.js';
import { acquireOn, isConnectionLost } from '../routing/lease.js';
import { type MapState, placementIn } from '../routing/map.js';
import { routed } from '../routing/retry.js';
import type { Row } from '../routing/rows.js';
import { shardForKey } from '../routing/shard-key.js';
import { traced } from '../telemetry/trace.js';
import { DIRECT_SETTING, entryTable, lookupText, lookupValueSql, PENDING_SETTING } from './ddl.js';
import { besideStatements, type PredictedChange, uniqueViolation } from './maintain.js';

/**
 * `router.insert` into a table with lookups when every entry the row makes lives on the row's server: the row and
 * its entries in ONE round trip and one local transaction — BEGIN, the row's INSERT (schema-qualified, as every
 * `router.insert` is, with no search_path of its own), the entries written from the change rows in SQL
 * (maintain.ts, "Step 2 in SQL"), COMMIT — one batch, one Sync.
 * That is the case of a sign-up placed beside its entry (`insert(table, row, { lookup })`, the row in the shard of
 * its value's hash), and of any insert whose entries happen to hash to shards of its server.
 *
 * When it does not apply, `undefined` and the caller writes the ordinary way (lookups/rows.ts `writeKept`: a
 * cross transaction, two round trips, two-phase commit across servers): a value the router cannot predict (not
 * a string, number or bigint), an entry on another server, a shard the map says is moving. When it fails in a way
 * that certainly committed nothing and that the ordinary way handles better — the COMMIT refused (a prediction
 * that missed: SF010; a deferred constraint), an entry statement that met a moved entry shard's fence or a
 * cutover lock — it rolls back and answers `undefined` too, and the ordinary way runs the insert again from the
 * start. A failure of the row's own INSERT is the insert's (retried by routing/retry.ts's rules: fence, move,
 * failover); a unique value taken is UNIQUE_VIOLATION; a connection lost after the batch went out is
 * COMMIT_UNKNOWN (its COMMIT may have run), never run again.
 *
 * Direct (`direct`: every lookup of the table has `direct_insert`, readiness.ts): the row and its entries are ONE
 * statement — the row's INSERT in a WITH, each entry INSERTed from the value the row got (`RETURNING` the column
 * as the capture trigger would store it), and a check — with DIRECT_SETTING on, so the capture trigger writes no
 * change row, and nothing is left for the commit to check. A plain INSERT into the entry's primary key is the
 * uniqueness check itself: it waits for a claimer or a letting-go owner still in flight and fails with 23505
 * (UNIQUE_VIOLATION) once another id's entry is committed — no second statement, so no moment between the insert
 * and a check in which the holder could let go (maintain.ts, entryStatements). The check divides by zero when the
 * row's values are not the predicted ones (an entry shard other than predicted) or a lookup the row gave no value
 * got one (a default): nothing commits and the ordinary way runs, as for a missed prediction above.
 */
export function insertBeside(
  ctx: RouterContext,
  lookups: readonly LookupDefinition[],
  shardOf: (map: MapState) => number,
  text: (schema: string) => string,
  values: unknown[],
  row: Row,
  direct = false,
): Promise<pg.QueryResult | undefined> {
  return traced(ctx.onEvent, 'insert', (trace) =>
    routed(ctx, 'insert', trace, shardOf, true, async (placement, info) => {
      const map = await ctx.map.fresh();
      const predicted = predictChanges(map, placement, lookups, row);
      if (!predicted) return undefined;
      const schemaOf = (shard: number) => placementIn(map, shard).schema;
      const oneStatement = direct
        ? directInsert(text(placement.schema), values, lookups, predicted, schemaOf)
        : undefined;
      const lease = await acquireOn(ctx, placement.server, { intent: 'write', shard: placement.shard });
      trace?.lease(placement.server, lease);
      const nodes = ctx.nodes(placement.server);
      const statements: BatchStatement[] = oneStatement
        ? [{ text: 'BEGIN' }, { text: `SET LOCAL ${DIRECT_SETTING} = on` }, oneStatement, { text: 'COMMIT' }]
        : [
            { text: 'BEGIN' },
            // The capture trigger's notice tells a session it has changes to apply; these are applied in this batch.
            { text: `SET LOCAL ${PENDING_SETTING} = on` },
            { text: text(placement.schema), values },
            ...besideStatements(predicted, placement.schema, schemaOf, map.logicalShards),
            { text: 'COMMIT' },
          ];
      const INSERT = 2;
      const COMMIT = statements.length - 1;
      let results: pg.QueryResult[];
      try {
        results = await queryBatch(lease.client, statements);
      } catch (failure) {
        const error = failure instanceof BatchFailure ? failure.cause : failure;
        const index = failure instanceof BatchFailure ? failure.index : INSERT;
        if (isConnectionLost(error, lease.client)) {
          nodes.noteError(lease.node, error);
          lease.release(error);
          throw new ShardflakeError(
            'COMMIT_UNKNOWN',
            `the connection to shard ${placement.shard}'s server was lost while an insert and its lookup entries were committing: it may or may not have been applied, and was not re-run`,
            { cause: error },
          );
        }
        // The batch stopped at `index`: a COMMIT that failed ended the transaction, any other failure left it
        // open and aborted (the statements after it, the COMMIT among them, did not run).
        const rolledBack = await lease.client.query('ROLLBACK').then(
          () => undefined,
          (e: unknown) => e ?? new Error('rollback failed'),
        );
        if (nodes.noteError(lease.node, error)) info.nodeGone = true;
        lease.release(rolledBack);
        if (index === COMMIT) return undefined;
        if (index === INSERT && oneStatement) {
          const code = (error as { code?: string }).code;
          // The row's values were not the predicted ones: the ordinary way writes its entries from what it holds.
          if (code === DIVISION_BY_ZERO) return undefined;
          const taken = lookups.find(
            (l) => l.unique && (error as { table?: string }).table === entryTable(l.name),
          );
          if (code === UNIQUE_SQLSTATE && taken) throw uniqueViolation(taken.name);
        }
        if (index <= INSERT) throw wrapPgError(error, lease.node);
        const mapped = statements[index]?.onError?.(error) ?? error;
        if (mapped !== error) throw mapped;
        return undefined;
      }
      if (nodes.hasReplicas) {
        const position = await nodes.positionAfterWrite(lease).catch(() => undefined);
        if (position !== undefined) ctx.positions.note(placement.server, position);
      }
      lease.release();
      return results[INSERT];
    }),
  );
}

/**
 * The change rows an insert of `row` will make (one per lookup of the table whose column it gives a value), when
 * every one's entry shard is on `placement`'s server and neither that shard nor the row's is moving; otherwise
 * undefined. A column the row leaves out makes no prediction (a default that fills it fails the COMMIT, see the
 * top). Values are predicted as `column::text` would print them: strings as they are, numbers and bigints in
 * decimal.
 */
export function predictChanges(
  map: MapState,
  placement: ShardPlacement,
  lookups: readonly LookupDefinition[],
  row: Row,
): PredictedChange[] | undefined {
  if (placement.state === 'moving') return undefined;
  const predicted: PredictedChange[] = [];
  for (const lookup of lookups) {
    const value = row[lookup.column];
    if (value === null || value === undefined) continue;
    const raw =
      typeof value === 'string'
        ? value
        : typeof value === 'bigint' || (typeof value === 'number' && Number.isSafeInteger(value))
          ? String(value)
          : undefined;
    if (raw === undefined) return undefined;
    // As the capture trigger stores it (ddl.ts lookupValueSql): normalized when the lookup says so.
    const text = lookupText(lookup, raw);
    const shard = shardForKey(text, map.logicalShards);
    const entry = placementIn(map, shard);
    if (entry.server !== placement.server || entry.state === 'moving') return undefined;
    predicted.push({ lookup: lookup.name, value: text, shard, unique: lookup.unique });
  }
  return predicted;
}

const DIVISION_BY_ZERO = '22012';
const UNIQUE_SQLSTATE = '23505';

/**
 * The direct insert (see insertBeside): `insert` is the router's `INSERT … RETURNING id` into the row's shard;
 * undefined when it has another form. Parameters after the row's own: each predicted value.
 */
export function directInsert(
  insert: string,
  values: readonly unknown[],
  lookups: readonly LookupDefinition[],
  predicted: readonly PredictedChange[],
  schemaOf: (shard: number) => string,
): BatchStatement | undefined {
  const tail = ' RETURNING id';
  if (!insert.endsWith(tail)) return undefined;
  const returned = lookups.map((l, i) => `${lookupValueSql(l, quoteIdent(l.column, 'column'))} AS v${i}`);
  const ctes = [`r AS (${insert.slice(0, -tail.length)} RETURNING id, ${returned.join(', ')})`];
  const checks: string[] = [];
  const params = [...values];
  lookups.forEach((lookup, i) => {
    const p = predicted.find((c) => c.lookup === lookup.name);
    if (!p) {
      checks.push(`NOT EXISTS (SELECT FROM r WHERE v${i} IS NOT NULL)`);
      return;
    }
    params.push(p.value);
    const table = qualified(schemaOf(p.shard), entryTable(lookup.name));
    ctes.push(
      `e${i} AS (INSERT INTO ${table} (value, id) SELECT v${i}, id FROM r WHERE v${i} = $${params.length} RETURNING 1)`,
    );
    checks.push(`(SELECT count(*) FROM e${i}) = 1`);
  });
  return {
    text: `WITH ${ctes.join(',\n ')}\nSELECT r.id FROM r WHERE 1 / (${checks.join(' AND ')})::int = 1`,
    values: params,
  };
}

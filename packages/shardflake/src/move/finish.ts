import { recordVerifiedDigests } from '../catalog/moves.js';
import { fencedSchemas, fenceSql, sealOldCopiesSql } from '../fence/fence.js';
import { inTransaction } from './connections.js';
import { movedMessage } from './cutover.js';
import { ddlPastGuard, unguardSchemas } from './ddl-guard.js';
import { dropPublication, dropSlots, dropSubscription } from './replication.js';
import { advanceAll, type Member, type Run } from './run.js';
import { digestSchemas } from './verify.js';

/**
 * The last step of a move, for the run itself and for `cluster cleanup` settling a switched move: the fence must
 * exist before the stream goes (a resumed move re-checks it), then no replication object may outlive the move.
 */
/** switched → done for every shard: the fences checked, then the set's subscription, publication and slot dropped. */
export async function finishMembers(s: Run, members: readonly Member[]): Promise<void> {
  const todo = members.filter((m) => m.record.phase === 'switched');
  if (todo.length === 0) return;
  const fenced = await fencedSchemas(
    s.source,
    todo.map((m) => m.record.schema),
  );
  for (const m of todo) {
    if (!fenced.has(m.record.schema)) {
      await ddlPastGuard(
        s.source,
        fenceSql(
          m.record.schema,
          m.tables.map((t) => t.name),
          movedMessage(s, m),
        ),
      );
    }
  }
  // What the fenced old copies hold now, for `cluster cleanup` to compare before it drops them (leftovers.ts).
  const digests = await inTransaction(s.source, () =>
    digestSchemas(
      s.source,
      todo.map((m) => ({ schema: m.record.schema, tables: m.tables.map((t) => t.name) })),
    ),
  );
  await recordVerifiedDigests(
    s.catalog,
    todo.map((m, k) => ({ id: m.record.id, tables: digests[k] ?? [] })),
  );
  await ddlPastGuard(s.source, sealOldCopiesSql(todo.map((m) => m.record.schema))); // see fence.ts
  await dropSubscription(s.target, s.names.subscription, true);
  await dropPublication(s.source, s.names.publication);
  await dropSlots(s.source, s.names.slot, todo[0]?.record.subscriptionOid ?? null);
  await unguardSchemas(
    s.source,
    todo.map((m) => m.record.schema),
  );
  await advanceAll(s, todo, 'done');
}

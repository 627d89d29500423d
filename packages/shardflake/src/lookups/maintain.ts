/*
 * lookups/: Global keys: a column found without its shard key, unique across the cluster when declared so. The
 * entries' SQL and capture triggers (ddl.ts), how a write keeps them (this file, with the argument), reads and the
 * router's owner cache (owner-cache.ts, with its argument), inserts placed beside their entries, the build for an
 * existing table, and the verify check.
 *
 * May import: errors, ids, postgres, config, topology, catalog, telemetry, fence, recovery, routing, transactions.
 */
import { ShardflakeError } from '../errors/errors.js';
import type { BatchStatement } from '../postgres/batch.js';
import { qualified } from '../postgres/identifier.js';
import { shardForKey } from '../routing/shard-key.js';
import { CHANGES_TABLE, entryTable, PENDING_NOTICE } from './ddl.js';

/**
 * How lookup entries are kept, and why a unique lookup has at most one committed owner per value.
 *
 * Terms. A lookup L declares (table T, column C). Its entries are rows (value, id) of `_shardflake_lookup_L`; the
 * entries of value v live only in shard h(v) = shardForKey(v::text) (BLAKE2s of the text, mod the shard count,
 * shard-key.ts), whatever shard the owning row is in. For a unique L, that table's primary key is (value).
 *
 * The invariant (I): in every committed state, row r of T (in any shard) holds v ≠ NULL in C if and only if
 * entry (v, r.id) exists in shard h(v).
 *
 * How a write keeps (I):
 *  1. Capture. A row trigger on T (ddl.ts) writes, inside the writer's own transaction, (L, old v, id, −1) and
 *     (L, new v, id, +1) into the shard's `_shardflake_lookup_changes` for every INSERT, UPDATE OF C or id, and
 *     DELETE — whichever client wrote the statement (raw SQL, Kysely, Drizzle: the trigger sees rows, not SQL).
 *     TRUNCATE is refused. The first capture of a transaction sends a notice, so the session knows it has work.
 *  2. Apply, before commit (`applyPendingChanges`, step by step below): the session deletes the change rows
 *     (DELETE … RETURNING: it reads exactly its own, since other transactions' uncommitted rows are invisible and
 *     no committed row ever exists, see 4), nets them per (L, v, id), and writes each net change into shard h(v):
 *     an INSERT of (v, id) for +1, a DELETE of (v, id) for −1, in one order (entry shard, then value) so that two
 *     sessions meet their entry locks in the same order.
 *  3. Commit. The writer's shards and every entry shard touched in 2 commit as ONE transaction: the same local
 *     transaction when they share a server, else the cross-server commit (transactions/cross.ts: prepare, the
 *     decision in the last participant's local commit, commit prepared; recovery finishes or undoes a transaction
 *     whose process died, by the decision row). So the row change and its entry change become visible together or
 *     not at all, and a rolled-back transaction (fn threw, a statement failed, the process died before the
 *     decision) changes neither.
 *  4. Safety net. A deferred constraint trigger on the change table fails COMMIT / PREPARE with SF010 if a change
 *     row is still there: a write made outside a shardflake session (psql, a plain pool) cannot commit a row
 *     without its entry. Hence the change table is empty in every committed state.
 * (I) then holds by induction over committed transactions: each one changes rows and entries by the same net
 * amounts (1–3), and nothing else commits changes to either (4; the `cluster migrate` build writes entries from
 * rows under their row locks, build.ts; `cluster verify --repair` is the only other writer, verify.ts).
 *
 * Uniqueness (unique L): suppose transactions A and B both try to commit value v on rows a ≠ b (any shards, any
 * processes). Each inserts (v, ·) into the primary key of `_shardflake_lookup_L` in the one shard h(v), as part
 * of its own atomic transaction (2–3). PostgreSQL's unique index check does not skip an invisible, uncommitted
 * entry: the second inserter finds the first one's index tuple and WAITS for the first inserter's transaction to
 * end — also when that transaction is PREPARED (a prepared transaction keeps its xid and its index tuples until
 * COMMIT/ROLLBACK PREPARED). When it ends: committed → the second insert conflicts and its session fails with
 * UNIQUE_VIOLATION and rolls back everything; rolled back → the second insert proceeds. Both cannot commit (I
 * also holds for B's view of A's entry: an entry committed means its row committed in the same transaction). A
 * value already owned by a committed row is refused the same way, without a wait. This is why the design does not
 * use the reader's check Vitess uses (lock the owner row, see if it is live): in PostgreSQL a `SELECT … FOR UPDATE`
 * of a row another transaction is inserting returns nothing at once instead of waiting, so an orphan check at
 * write time would free a value whose owner is about to commit. Here no orphan needs freeing at write time:
 * entries are never orphans in a committed state (I).
 *
 * Step 2 in SQL, for one inserted row whose entries are all on its own server (`besideStatements`, used by
 * insert-beside.ts). The router knows the row's values before it sends the INSERT, so it can predict the change
 * rows the capture triggers will write — (L, v, +1) for each lookup L of the table whose column the row gives a
 * value v — without knowing the new id. The statements that follow the INSERT in the same transaction then take
 * the id from the change row itself: per predicted (L, v), an INSERT of the entry SELECTed from the change row
 * (no change row: nothing inserted), then a DELETE of that change row whose RETURNING divides by zero unless the
 * entry (v, its id) is there (a statement of its own, so under READ COMMITTED it looks after the insert's wait, as
 * the check of `entryStatements` does). A prediction that missed — a column default, a trigger that rewrote the value, a text
 * form other than the one predicted — leaves a change row undeleted, so the COMMIT fails with SF010 (step 4) and
 * nothing commits: the caller runs the write again the ordinary way. A wrong prediction can cost a retry, never
 * an entry: entries are only ever made from change rows, in the shard h(v) of the value the change row holds
 * (a predicted entry shard is h(predicted v), and only a change row holding that v is read).
 *
 * Crashes (kill -9 at any step): before the decision, the server rolls back each unprepared local transaction
 * when its connection dies, and recovery rolls back each prepared one that has no decision row; after it, recovery
 * commits every prepared one. Until recovery runs, a prepared entry insert keeps its index tuple, so a claimer
 * of the same value waits (it is not wrongly let in); after recovery the value is free or owned by the committed
 * row. No value is owned twice at any moment, and none stays stuck past recovery.
 *
 * Reads (read.ts): an entry is a hint checked against its owner row (id → shard → row, C::text = v), so an entry
 * that is visible before its owner's participant commits (atomic is not isolated across servers), or a leftover
 * made by hand, never returns a wrong row.
 *
 * Moves: the entry tables and the change table are tables of the shard schema like any other, so a move copies
 * and verifies them with the shard's rows (move/verify.ts digests every table of the schema), and its fence stops
 * writes to the old copy's entry tables as it stops writes to the rest.
 */

/** One captured change, as the trigger wrote it. */
export interface Change {
  lookup: string;
  value: string;
  id: bigint;
  delta: number;
  unique: boolean;
}

/** A change to one entry, after netting a transaction's captures. */
export interface EntryChange {
  lookup: string;
  value: string;
  id: bigint;
  /** add: insert (value, id); remove: delete it. */
  op: 'add' | 'remove';
  /** h(value). */
  shard: number;
  unique: boolean;
}

/** Where entry writes go: a query runner in the transaction that holds `shard`, and the shard's schema. */
export type JoinShard = (
  shard: number,
) => Promise<{ schema: string; query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }> }>;

/** A session's client, watched for the capture trigger's notice (step 1). */
export interface NoticeWatch {
  readonly pending: boolean;
  stop(): void;
}

export function watchNotices(client: {
  on(event: 'notice', listener: (notice: { message?: string }) => void): unknown;
  removeListener(event: 'notice', listener: (notice: { message?: string }) => void): unknown;
}): NoticeWatch {
  let pending = false;
  const listener = (notice: { message?: string }) => {
    if (notice.message === PENDING_NOTICE) pending = true;
  };
  client.on('notice', listener);
  return {
    get pending() {
      return pending;
    },
    stop: () => void client.removeListener('notice', listener),
  };
}

/** Step 2's netting: per (lookup, value, id), the sum of the deltas in capture order; zero sums vanish. */
export function netChanges(changes: readonly Change[], logicalShards: number): EntryChange[] {
  const sums = new Map<string, { change: Change; sum: number }>();
  for (const change of changes) {
    const key = `${change.lookup}\0${change.id}\0${change.value}`;
    const entry = sums.get(key);
    if (entry) entry.sum += change.delta;
    else sums.set(key, { change, sum: change.delta });
  }
  const net: EntryChange[] = [];
  for (const { change, sum } of sums.values()) {
    if (sum === 0) continue;
    net.push({
      lookup: change.lookup,
      value: change.value,
      id: change.id,
      op: sum > 0 ? 'add' : 'remove',
      shard: shardForKey(change.value, logicalShards),
      unique: change.unique,
    });
  }
  // One order for every session (entry shard, lookup, value, removes first): two sessions that both touch the
  // same entries meet their locks in the same order instead of each holding one the other waits for.
  return net.sort(
    (x, y) =>
      x.shard - y.shard ||
      (x.lookup < y.lookup ? -1 : x.lookup > y.lookup ? 1 : 0) ||
      (x.op === y.op ? 0 : x.op === 'remove' ? -1 : 1) ||
      (x.value < y.value ? -1 : x.value > y.value ? 1 : 0),
  );
}

/** The UNIQUE_VIOLATION a second claimer gets: it names the lookup, never the value (personal data). */
export function uniqueViolation(lookup: string): ShardflakeError {
  return new ShardflakeError(
    'UNIQUE_VIOLATION',
    `the value is already taken in unique lookup ${lookup} (another row holds it, or a transaction claiming it committed first)`,
  );
}

/** Step 2's first half for one writer shard: the statement that reads and empties its change table. */
export function takeChangesSql(schema: string): string {
  return `DELETE FROM ${qualified(schema, CHANGES_TABLE)} RETURNING seq, lookup, value, id, delta, is_unique`;
}

/** The rows takeChangesSql returned, in capture order. */
export function changesOf(rows: readonly unknown[]): Change[] {
  return (rows as (Omit<Change, 'unique'> & { seq: bigint; is_unique: boolean })[])
    .slice()
    .sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1))
    .map((r) => ({
      lookup: r.lookup,
      value: r.value,
      id: BigInt(r.id),
      delta: Number(r.delta),
      unique: r.is_unique,
    }));
}

/** Step 2's first half for one writer shard: reads and empties its change table. */
export async function takeChanges(writer: {
  schema: string;
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}): Promise<Change[]> {
  return changesOf((await writer.query(takeChangesSql(writer.schema))).rows);
}

/** Step 2 for one writer shard whose entries may go anywhere `join` reaches. */
export async function applyPendingChanges(
  writer: { schema: string; query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }> },
  logicalShards: number,
  join: JoinShard,
): Promise<EntryChange[]> {
  const net = netChanges(await takeChanges(writer), logicalShards);
  await writeEntries(net, join);
  return net;
}

/** A write of entries into one entry shard (schema-qualified); its failure is what `onError` makes of it. */
export interface EntryStatement extends BatchStatement {
  shard: number;
}

/** SQLSTATE of the uniqueness check below (a division by zero: an error with no detail that could hold a value). */
const TAKEN_SQLSTATE = '22012';

/**
 * The statements that write net entry changes, grouped by (entry shard, lookup, op), in netChanges' order: a
 * DELETE per group of removes; per group of adds an INSERT … ON CONFLICT DO NOTHING and, for a unique lookup, a
 * check that fails unless every entry of the group is now there. No statement's result is needed, so they can be
 * sent together with the commit (lookups/cross.ts).
 *
 * The insert waits, like a plain insert, for an uncommitted conflicting entry's transaction to end, and skips an
 * entry whose value another id holds (committed). The check is a statement of its own, so under READ COMMITTED it
 * takes a new snapshot after that wait; it asks for this transaction's own entries, not for another owner's: an
 * owner that held the value when the insert skipped it may let it go (its transaction deleting that entry
 * commits) before the check runs, and "no other owner now" would then pass a claim whose entry was never written
 * (a row without its entry, and a value open to a second owner: found by the owner-cache property test). A
 * missing entry divides by zero: the error aborts the transaction (and the COMMIT sent after it does not run) and
 * maps to UNIQUE_VIOLATION naming the lookup, never the value — the value was taken when the insert looked, as a
 * plain unique insert would have said. */
export function entryStatements(
  net: readonly EntryChange[],
  schemaOf: (shard: number) => string,
): EntryStatement[] {
  const statements: EntryStatement[] = [];
  for (let i = 0; i < net.length; ) {
    const first = net[i] as EntryChange;
    let j = i;
    while (
      j < net.length &&
      net[j]?.shard === first.shard &&
      net[j]?.lookup === first.lookup &&
      net[j]?.op === first.op
    )
      j++;
    const group = net.slice(i, j);
    i = j;
    const table = qualified(schemaOf(first.shard), entryTable(first.lookup));
    const shard = first.shard;
    // One entry (a sign-up, an update of one row) binds plain values: PostgreSQL runs that form faster than the
    // unnest of arrays that a group of several needs.
    const one = group.length === 1;
    const values = one ? [first.value, first.id] : [group.map((c) => c.value), group.map((c) => c.id)];
    const pairs = one ? '(SELECT $1::text AS value, $2::bigint AS id)' : 'unnest($1::text[], $2::bigint[])';
    if (first.op === 'remove') {
      statements.push({
        shard,
        text: one
          ? `DELETE FROM ${table} WHERE value = $1 AND id = $2`
          : `DELETE FROM ${table} e USING ${pairs} AS g(value, id) WHERE e.value = g.value AND e.id = g.id`,
        values,
      });
      continue;
    }
    statements.push({
      shard,
      text: one
        ? `INSERT INTO ${table} (value, id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
        : `INSERT INTO ${table} (value, id) SELECT * FROM ${pairs} ON CONFLICT DO NOTHING`,
      values,
    });
    if (!first.unique) continue;
    const lookup = first.lookup;
    statements.push({
      shard,
      text: one
        ? `SELECT 1 / (count(*) = 1)::int FROM ${table} WHERE value = $1 AND id = $2`
        : `SELECT 1 / (count(*) = ${group.length})::int FROM ${table} e JOIN ${pairs} AS g(value, id) ON e.value = g.value AND e.id = g.id`,
      values,
      onError: (error) =>
        (error as { code?: string }).code === TAKEN_SQLSTATE ? uniqueViolation(lookup) : error,
    });
  }
  return statements;
}

/** A change of one inserted row predicted from its values: (lookup, value) with its entry shard h(value). */
export interface PredictedChange {
  lookup: string;
  value: string;
  /** h(value). */
  shard: number;
  unique: boolean;
}

/**
 * Step 2 in SQL for one inserted row whose predicted changes' entry shards are on the row's server (see "Step 2 in
 * SQL" at the top): statements to send after the row's INSERT in its transaction, before its COMMIT, in
 * netChanges' order (so its entry locks are met in the order every session meets them). `writer` is the row's
 * shard schema (its change table), `schemaOf` gives an entry shard's.
 */
export function besideStatements(
  predicted: readonly PredictedChange[],
  writer: string,
  schemaOf: (shard: number) => string,
  logicalShards: number,
): BatchStatement[] {
  const changes = qualified(writer, CHANGES_TABLE);
  const ordered = netChanges(
    predicted.map((p) => ({ lookup: p.lookup, value: p.value, id: 0n, delta: 1, unique: p.unique })),
    logicalShards,
  );
  return ordered.flatMap((change) => {
    const table = qualified(schemaOf(change.shard), entryTable(change.lookup));
    const values = [change.lookup, change.value];
    const mine = 'lookup = $1 AND value = $2 AND delta = 1';
    const lookup = change.lookup;
    return [
      {
        text: `INSERT INTO ${table} (value, id) SELECT value, id FROM ${changes} WHERE ${mine} ON CONFLICT DO NOTHING`,
        values,
      },
      change.unique
        ? {
            text: `DELETE FROM ${changes} c WHERE ${mine}
 RETURNING 1 / (EXISTS (SELECT FROM ${table} e WHERE e.value = c.value AND e.id = c.id))::int`,
            values,
            onError: (error: unknown) =>
              (error as { code?: string }).code === TAKEN_SQLSTATE ? uniqueViolation(lookup) : error,
          }
        : { text: `DELETE FROM ${changes} WHERE ${mine}`, values },
    ];
  });
}

/** Writes net entry changes one statement at a time, each where `join` says its entry shard is. */
export async function writeEntries(net: readonly EntryChange[], join: JoinShard): Promise<void> {
  const targets = new Map<number, Awaited<ReturnType<JoinShard>>>();
  for (const change of net)
    if (!targets.has(change.shard)) targets.set(change.shard, await join(change.shard));
  for (const statement of entryStatements(
    net,
    (shard) => (targets.get(shard) as { schema: string }).schema,
  )) {
    const target = targets.get(statement.shard) as Awaited<ReturnType<JoinShard>>;
    try {
      await target.query(statement.text, statement.values as unknown[]);
    } catch (error) {
      throw statement.onError?.(error) ?? error;
    }
  }
}

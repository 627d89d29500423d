import { ShardflakeError } from '../errors/errors.js';
import type { Queryable } from '../postgres/connect.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { decodePgoutput, type PgoutputMessage } from './pgoutput.js';

/**
 * The source's side of the adoption: one publication of the adopted tables and one logical replication slot
 * (pgoutput), read over plain SQL: `pg_logical_slot_peek_binary_changes` returns whole transactions from the
 * slot's confirmed point without consuming them, and `pg_replication_slot_advance` confirms them only once every
 * target committed them. So a kill at any moment loses nothing (the slot still holds what was not confirmed) and
 * doubles nothing (each target records the last LSN it applied in the transaction that applied it, apply.ts).
 *
 * Why SQL and not the streaming protocol (START_REPLICATION, e.g. the pg-logical-replication package): no open
 * replication connection to keep alive, no new dependency in the library, a reader that can stop and resume at
 * any transaction boundary by what it confirmed; the cost is that each read decodes again from the slot's restart
 * point, which the confirmations keep close.
 */
export interface PeekedTransaction {
  messages: PgoutputMessage[];
  /** The end of the transaction's commit record: what the slot is advanced to once it is applied. */
  endLsn: bigint;
  commitTime: Date;
}

export async function createPublication(
  source: Queryable,
  name: string,
  schema: string,
  tables: readonly string[],
): Promise<void> {
  const { rows } = await source.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [name]);
  if (rows.length > 0) return;
  await source.query(
    `CREATE PUBLICATION ${quoteIdent(name)} FOR TABLE ${tables.map((t) => qualified(schema, t)).join(', ')}`,
  );
}

export async function dropPublication(source: Queryable, name: string): Promise<void> {
  await source.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(name)}`);
}

/** Drops the slot when it exists (its WAL is released); a slot another session reads is ended first. */
export async function dropSlot(source: Queryable, slot: string): Promise<void> {
  await source.query(
    `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`,
    [slot],
  );
  await source.query(
    'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
    [slot],
  );
}

/**
 * Whole transactions after the slot's confirmed point, up to about `changes` messages (a transaction is never
 * cut), and up to `uptoLsn` when given.
 */
export async function peekTransactions(
  source: Queryable,
  slot: string,
  publication: string,
  changes: number,
  uptoLsn?: string,
): Promise<PeekedTransaction[]> {
  const { rows } = await source.query(
    `SELECT data FROM pg_logical_slot_peek_binary_changes($1, $2::pg_lsn, $3, 'proto_version', '1', 'publication_names', $4)`,
    [slot, uptoLsn ?? null, changes, publication],
  );
  const out: PeekedTransaction[] = [];
  let current: PgoutputMessage[] = [];
  for (const row of rows as { data: Buffer }[]) {
    const message = decodePgoutput(row.data);
    if (message.tag === 'begin') current = [];
    else if (message.tag === 'commit') {
      out.push({ messages: current, endLsn: message.endLsn, commitTime: message.commitTime });
      current = [];
    } else current.push(message);
  }
  return out;
}

export async function advanceSlot(source: Queryable, slot: string, lsn: string): Promise<void> {
  await source.query('SELECT pg_replication_slot_advance($1, $2::pg_lsn)', [slot, lsn]);
}

export interface SlotState {
  exists: boolean;
  confirmedLsn: string | null;
  /** WAL the slot keeps on the source: from its restart point to the source's current LSN. */
  heldBytes: bigint;
  /** Source WAL not yet confirmed: from the confirmed point to the current LSN. */
  behindBytes: bigint;
  /** reserved, extended, unreserved or lost (pg_replication_slots.wal_status). */
  walStatus: string | null;
  currentLsn: string;
}

export async function slotState(source: Queryable, slot: string): Promise<SlotState> {
  const { rows } = await source.query(
    `SELECT s.confirmed_flush_lsn::text AS confirmed, s.wal_status,
            coalesce(pg_current_wal_lsn() - s.restart_lsn, 0)::bigint AS held,
            coalesce(pg_current_wal_lsn() - s.confirmed_flush_lsn, 0)::bigint AS behind,
            pg_current_wal_lsn()::text AS current, s.slot_name IS NOT NULL AS exists
       FROM (SELECT 1) one LEFT JOIN pg_replication_slots s ON s.slot_name = $1`,
    [slot],
  );
  const r = rows[0] as Record<string, unknown>;
  return {
    exists: r.exists as boolean,
    confirmedLsn: (r.confirmed as string | null) ?? null,
    heldBytes: BigInt(r.held as bigint),
    behindBytes: BigInt(r.behind as bigint),
    walStatus: (r.wal_status as string | null) ?? null,
    currentLsn: r.current as string,
  };
}

/**
 * Stops the run when the slot holds more WAL than allowed, or the source invalidated it
 * (max_slot_wal_keep_size): a slot that keeps WAL without a reader fills the source's disk. The slot is dropped
 * first, so the source is safe whatever happens next; the adoption then has to start again (abort, run).
 */
export async function checkSlotBound(source: Queryable, slot: string, maxBytes: number): Promise<SlotState> {
  const state = await slotState(source, slot);
  const lost = state.exists && (state.walStatus === 'lost' || state.walStatus === 'unreserved');
  if (!state.exists || lost || state.heldBytes > BigInt(maxBytes)) {
    await dropSlot(source, slot).catch(() => {});
    const why = !state.exists
      ? `the slot ${slot} is gone from the source`
      : lost
        ? `the source invalidated the slot ${slot} (wal_status ${state.walStatus}: max_slot_wal_keep_size passed)`
        : `the slot ${slot} held ${state.heldBytes} bytes of WAL on the source, more than adopt.maxSlotWalBytes (${maxBytes})`;
    throw new ShardflakeError(
      'ADOPT_FAILED',
      `${why}; the slot was dropped so the source's disk is safe, and the changes since the copy cannot be replayed: run shardflake cluster adopt abort, then adopt run again`,
    );
  }
  return state;
}

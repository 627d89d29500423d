import {
  ADOPT_LOCK_KEY,
  type AdoptionRecord,
  type AdoptionTable,
  readAdoption,
  readAdoptionTables,
} from '../catalog/adopt.js';
import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { connect, describeUrl, wrapPgError } from '../postgres/connect.js';
import { connectServer } from '../topology/connections.js';
import { adoptionNames } from './run.js';
import { type SlotState, slotState } from './slot.js';

/**
 * `cluster adopt status`: the phase, the rows copied per table, how far the stream is behind the source (bytes of
 * WAL not yet confirmed, and seconds since the stream last confirmed a change while it is behind), the WAL the slot
 * holds on the source and its `wal_status`, an ETA for the copy, whether an `adopt run` is running now, and what
 * stopped the last one.
 */
export interface AdoptStatus {
  phase: AdoptionRecord['phase'];
  source: string;
  root: string;
  running: boolean;
  tables: AdoptionTable[];
  copiedRows: bigint;
  estimatedRows: bigint;
  behindBytes: bigint | null;
  behindSeconds: number | null;
  heldBytes: bigint | null;
  walStatus: string | null;
  maxSlotWalBytes: number;
  appliedLsn: string | null;
  etaSeconds: number | null;
  oldIdsBelow: bigint;
  pauseMs: number | null;
  startedAt: Date;
  switchedAt: Date | null;
  lastError: string | null;
}

export async function adoptionStatus(config: ClusterConfig): Promise<AdoptStatus | null> {
  const catalog = await connectServer(config, config.catalog, { applicationName: 'shardflake adopt status' });
  let record: AdoptionRecord | null;
  let tables: AdoptionTable[];
  let running: boolean;
  try {
    record = await readAdoption(catalog);
    tables = await readAdoptionTables(catalog);
    const { rows } = await catalog.query(
      "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted) AS running",
      [ADOPT_LOCK_KEY],
    );
    running = (rows[0] as { running: boolean }).running;
  } catch (error) {
    throw wrapPgError(error);
  } finally {
    await catalog.end().catch(() => {});
  }
  if (!record) return null;
  let slot: SlotState | null = null;
  if (config.adopt && record.phase !== 'done' && record.phase !== 'aborted') {
    const source = await connect(config.adopt.from, { applicationName: 'shardflake adopt status' }).catch(
      () => null,
    );
    if (source) {
      try {
        slot = await slotState(source, adoptionNames(config).slot);
      } finally {
        await source.end().catch(() => {});
      }
    }
  }
  const copiedRows = tables.reduce((n, t) => n + t.rowsCopied, 0n);
  const estimatedRows = tables.reduce((n, t) => n + t.rowsEstimate, 0n);
  const elapsed = (Date.now() - record.startedAt.getTime()) / 1000;
  const behind = slot?.exists ? slot.behindBytes : null;
  const eta =
    record.phase === 'copying' && copiedRows > 0n && estimatedRows > copiedRows
      ? (Number(estimatedRows - copiedRows) * elapsed) / Number(copiedRows)
      : record.phase === 'streaming' && behind !== null && behind === 0n
        ? 0
        : null;
  return {
    phase: record.phase,
    source: describeUrl(record.sourceUrl),
    root: record.root,
    running,
    tables,
    copiedRows,
    estimatedRows,
    behindBytes: behind,
    behindSeconds:
      behind !== null && behind > 0n && record.appliedAt
        ? (Date.now() - record.appliedAt.getTime()) / 1000
        : behind === 0n
          ? 0
          : null,
    heldBytes: slot?.exists ? slot.heldBytes : null,
    walStatus: slot?.walStatus ?? null,
    maxSlotWalBytes: config.adopt?.maxSlotWalBytes ?? 0,
    appliedLsn: record.appliedLsn,
    etaSeconds: eta,
    oldIdsBelow: record.oldIdsBelow,
    pauseMs: record.pauseMs,
    startedAt: record.startedAt,
    switchedAt: record.switchedAt,
    lastError: record.lastError,
  };
}

export function requireAdoptSection(config: ClusterConfig): void {
  if (!config.adopt)
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `${config.source}: has no adopt section; make the config with shardflake cluster adopt plan`,
    );
}

import type pg from 'pg';
import type { MovePhase } from '../catalog/moves.js';
import { type MoveRecord, recordPhases } from '../catalog/moves.js';
import type { ClusterConfig } from '../config/config.js';
import { kill, MoveInterrupted } from './connections.js';
import type { MoveStep, Options, SET_DEFAULTS, SetMoveOptions } from './options.js';
import type { ReplicationNames } from './replication.js';
import type { SnapshotCopyResult } from './snapshot-copy.js';
import type { SourceTable } from './tables.js';

/**
 * The state one run of a move carries from step to step (engine.ts), and the helpers every step uses. A move is a
 * set of shards from one server to another sharing one replication stream; a single shard's move is a set of one.
 */
export interface Member {
  record: MoveRecord;
  tables: SourceTable[];
  resumedFrom: MovePhase | null;
  rows: bigint;
  pauseMs: number | null;
  pauseSteps: Record<string, number>;
  mapVersion: bigint;
  snapshot: { pauseMs: number; compareMs: number } | null;
}

export interface Run {
  config: ClusterConfig;
  opts: Options & typeof SET_DEFAULTS & SetMoveOptions;
  catalog: pg.Client;
  source: pg.Client;
  target: pg.Client;
  from: string;
  to: string;
  /** The id that names the stream: the set's batch id, or the one move's own id. */
  streamId: bigint;
  /** The set's batch id (null for a move of one shard). */
  batchId: bigint | null;
  names: ReplicationNames;
  members: Member[];
  copy: SnapshotCopyResult | null;
  catchUpMs: number | null;
  /** Where the run's time went, ms per step of this run. */
  steps: Record<string, number>;
}

export function describe(s: Run): string {
  if (s.members.length === 1) {
    const m = s.members[0] as Member;
    return `move #${m.record.id} of shard ${m.record.shard} (server ${s.from} to server ${s.to})`;
  }
  return `set #${s.streamId} (${s.members.length} shards from server ${s.from} to server ${s.to})`;
}

/** The test hook and the abort signal: stop like a killed process, without a word (no rollback; a rerun resumes). */
export async function checkpoint(s: Run, step: MoveStep | null): Promise<void> {
  if (step !== null) await s.opts.afterStep?.(step);
  if ((step !== null && s.opts.stopAfter === step) || s.opts.signal?.aborted) {
    kill(s.source);
    kill(s.target);
    kill(s.catalog);
    throw new MoveInterrupted(
      `${describe(s)} stopped after ${step ?? 'a check'}; run the command again to resume or roll it back`,
    );
  }
}

/** Tells the caller's `onProgress` that these members reached `phase`. */
export function reportPhase(s: Run, members: readonly Member[], phase: MovePhase): void {
  for (const m of members) {
    s.opts.onProgress?.({
      shard: m.record.shard,
      moveId: m.record.id,
      phase,
      copiedRows: m.rows,
      totalRows: m.rows,
    });
  }
}

/** Records `phase` for `members` (one statement), then the hook. */
export async function advanceAll(
  s: Run,
  members: readonly Member[],
  phase: MovePhase,
  extra: { subscriptionOid?: bigint } = {},
): Promise<void> {
  await recordPhases(
    s.catalog,
    members.map((m) => m.record.id),
    phase,
    extra,
  );
  for (const m of members) {
    m.record = {
      ...m.record,
      phase,
      subscriptionOid: extra.subscriptionOid ?? m.record.subscriptionOid,
    };
  }
  reportPhase(s, members, phase);
  await checkpoint(s, phase);
}

export function pending(s: Run, phase: MovePhase): Member[] {
  return s.members.filter((m) => m.record.phase === phase);
}

export const round = (ms: number) => Math.round(ms * 10) / 10;

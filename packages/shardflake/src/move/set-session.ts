import type pg from 'pg';
import type { ClusterConfig } from '../cluster/config.js';
import type { MoveStep, Options, SET_DEFAULTS, SetMoveOptions } from './options.js';
import type { MovePhase } from './phases.js';
import { type MoveRecord, recordPhases } from './record.js';
import type { ReplicationNames } from './replication.js';
import { kill, MoveInterrupted } from './session.js';
import type { SnapshotCopyResult } from './snapshot-copy.js';
import type { SourceTable } from './tables.js';

/** The state one run of a set carries from step to step (see set.ts), and the helpers every step uses. */
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

export interface SetSession {
  config: ClusterConfig;
  opts: Options & typeof SET_DEFAULTS & SetMoveOptions;
  catalog: pg.Client;
  source: pg.Client;
  target: pg.Client;
  from: string;
  to: string;
  batchId: bigint;
  names: ReplicationNames;
  members: Member[];
  copy: SnapshotCopyResult | null;
  catchUpMs: number | null;
  /** Where the set's time went, ms per step of this run. */
  steps: Record<string, number>;
}

export function describe(s: SetSession): string {
  return `set #${s.batchId} (${s.members.length} shards from server ${s.from} to server ${s.to})`;
}

/** The test hook and the abort signal, as in a single move: stop like a killed process, without a word. */
export async function checkpoint(s: SetSession, step: MoveStep | null): Promise<void> {
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

export async function advanceAll(s: SetSession, members: readonly Member[], phase: MovePhase): Promise<void> {
  await recordPhases(
    s.catalog,
    members.map((m) => m.record.id),
    phase,
  );
  for (const m of members) m.record = { ...m.record, phase };
  await checkpoint(s, phase);
}

export function pending(s: SetSession, phase: MovePhase): Member[] {
  return s.members.filter((m) => m.record.phase === phase);
}

import { ShardflakeError } from '../errors.js';

/**
 * The steps of an online shard move, in order. Each name says what is already true once the catalog records it,
 * so a rerun after a crash knows exactly which actions have happened (the action of the next phase may have
 * started, which is why every action is idempotent):
 *
 * - `planned`     the move row exists, input was checked, the shard is marked `moving` (migrations refuse it).
 * - `prepared`    the target holds the shard's schema, generator and empty tables; the source has a publication.
 * - `subscribed`  the target's subscription (and the source's replication slot) exist; the initial copy runs.
 * - `synced`      every table finished its initial copy and the target is caught up to within a few MB.
 * - `fenced`      writes were paused, the target caught up to the source's last LSN, both copies verified equal,
 *                 the generator moved, and the source fenced for good (SF001) — in one source transaction.
 * - `switched`    the catalog places the shard on the target (new map version, NOTIFY sent).
 * - `done`        subscription, publication and slots are dropped; the fenced old copy waits for `cluster cleanup`.
 * - `rolled_back` the move was undone: target copy and replication objects removed, shard active on its source.
 *
 * Before `switched` a failed or interrupted move rolls back (or resumes, if rerun towards the same target); from
 * `switched` on it only rolls forward, because the target is then the one writable copy.
 */
export const MOVE_PHASES = [
  'planned',
  'prepared',
  'subscribed',
  'synced',
  'fenced',
  'switched',
  'done',
  'rolled_back',
] as const;
export type MovePhase = (typeof MOVE_PHASES)[number];

/** Phases after which the move has ended, one way or the other. */
export const FINAL_PHASES = ['done', 'rolled_back'] as const satisfies readonly MovePhase[];

export function isMovePhase(value: unknown): value is MovePhase {
  return typeof value === 'string' && (MOVE_PHASES as readonly string[]).includes(value);
}

export function parseMovePhase(value: unknown): MovePhase {
  if (!isMovePhase(value)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `${JSON.stringify(value)} is not a move phase (phases: ${MOVE_PHASES.join(', ')})`,
    );
  }
  return value;
}

export function isFinal(phase: MovePhase): boolean {
  return (FINAL_PHASES as readonly string[]).includes(phase);
}

/** True when `phase` is at or after `than` in the forward order (rolled_back is after nothing but itself). */
export function reached(phase: MovePhase, than: MovePhase): boolean {
  if (phase === 'rolled_back' || than === 'rolled_back') return phase === than;
  return MOVE_PHASES.indexOf(phase) >= MOVE_PHASES.indexOf(than);
}

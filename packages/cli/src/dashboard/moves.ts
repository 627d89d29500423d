import { readMoveRows } from 'shardflake/internal/catalog/moves.js';
import { redactSecrets } from 'shardflake/internal/errors/errors.js';
import type { Queryable } from 'shardflake/internal/postgres/connect.js';

/**
 * Shard moves as the dashboard shows them, read from the catalog's `shardflake.moves` (catalog/moves.ts
 * readMoveRows). A row is sent as the catalog holds it (every column, as JSON), so columns a newer move code adds
 * show up without a change here.
 *
 * The order of the phases is read from the table's own CHECK constraint (the move code writes its phase list
 * there), which gives each move a progress fraction: the position of its phase on the way to `done`.
 */
export interface MoveRow {
  id: string;
  shard: number;
  from: string;
  to: string;
  phase: string;
  /** 0..1: how far the phase is on the way to `done` (null for a phase the constraint does not list). */
  progress: number | null;
  finished: boolean;
  startedAt: string | null;
  updatedAt: string | null;
  error: string | null;
  /** Every column of the catalog row, as the catalog holds it. */
  row: Record<string, unknown>;
}

export interface MovesView {
  /** Phases in order, as the catalog's CHECK constraint lists them (empty before the first move). */
  phases: string[];
  /** Unfinished moves first (oldest first), then the most recent finished ones (newest first). */
  moves: MoveRow[];
}

const RECENT_FINISHED = 20;

export async function readMoves(catalog: Queryable): Promise<MovesView> {
  const { phases, rows } = await readMoveRows(catalog, RECENT_FINISHED);
  const done = phases.indexOf('done');
  const moves = rows.map(({ row, finished }: { row: Record<string, unknown>; finished: boolean }) => {
    const phase = String(row.phase);
    const at = phases.indexOf(phase);
    const text = (v: unknown) => (v === null || v === undefined ? null : redactSecrets(String(v)));
    return {
      id: String(row.id),
      shard: Number(row.shard),
      from: String(row.from_server ?? ''),
      to: String(row.to_server ?? ''),
      phase,
      progress: phase === 'done' ? 1 : at >= 0 && done > 0 && at < done ? at / done : null,
      finished,
      startedAt: text(row.started_at),
      updatedAt: text(row.updated_at),
      error: text(row.error),
      row: JSON.parse(redactSecrets(JSON.stringify(row))) as Record<string, unknown>,
    };
  });
  return { phases, moves };
}

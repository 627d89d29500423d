import type { ClusterConfig } from '../config/config.js';
import type { Queryable } from '../postgres/connect.js';
import { wrapPgError } from '../postgres/connect.js';
import { HAS_STATE_SQL, READ_STATE_SQL, REFERENCE_SQL_VERSION } from './sql.js';

/** One server's reference copy as its bookkeeping describes it (sql.ts). */
export interface ReferenceState {
  sqlVersion: number;
  /** Holds every row the other synced copies hold (false: made later, not filled yet). */
  synced: boolean;
  /** The servers this copy knows to hold a synced copy (sql.ts; empty before version 2 of the SQL). */
  copies: string[];
  /** Config tables created on this server. */
  tables: string[];
  /** Highest reference migration applied. */
  version: number;
}

/** True when the config has reference tables (or migrations of them). */
export function hasReference(
  config: Pick<ClusterConfig, 'referenceTables' | 'referenceMigrations'>,
): boolean {
  return config.referenceTables.length > 0 || config.referenceMigrations.length > 0;
}

/** A server's reference state, or null when it has no reference schema. */
export async function readReferenceState(client: Queryable): Promise<ReferenceState | null> {
  try {
    const has = await client.query(HAS_STATE_SQL);
    if (!(has.rows[0] as { ok: boolean }).ok) return null;
    const { rows } = await client.query(READ_STATE_SQL);
    return (rows[0] as { state: ReferenceState } | undefined)?.state ?? null;
  } catch (error) {
    throw wrapPgError(error);
  }
}

/** Whether a server's copy is what the config asks for: synced, current SQL, every table, every migration. */
export function isCurrent(
  config: Pick<ClusterConfig, 'referenceTables' | 'referenceMigrations'>,
  state: ReferenceState | null,
): boolean {
  if (!state) return !hasReference(config);
  return (
    state.synced &&
    state.sqlVersion >= REFERENCE_SQL_VERSION &&
    state.version === config.referenceMigrations.length &&
    config.referenceTables.every((t) => state.tables.includes(t.name))
  );
}

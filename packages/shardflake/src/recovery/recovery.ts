/*
 * recovery/: The durable side of two-phase commit: global transaction ids, the decisions in the catalog, settling
 * what is in doubt (in every router and from `cluster recover`), settling prepared transactions before a move or a
 * migration, and their verify check.
 *
 * May import: errors, postgres, config, topology, catalog, telemetry.
 */
import {
  DELETE_DECISIONS_SQL,
  INSERT_ABORT_SQL,
  installTransactionLog,
  LIST_PREPARED_SQL,
  OLD_DECISIONS_SQL,
  READ_DECISIONS_SQL,
} from '../catalog/transactions.js';
import type { ShardflakeError } from '../errors/errors.js';
import { type Queryable, type ServerAccess, wrapPgError } from '../postgres/connect.js';
import { quoteLiteral } from '../postgres/identifier.js';
import type { RouterEvent, TransactionPhase } from '../telemetry/events.js';
import { type Gid, gidPrefix, parseGid } from './gid.js';

/**
 * Recovery of cross-server transactions: every prepared transaction of this cluster (its gid starts with
 * `sf:<cluster id>:`) is committed when its decision server holds a `commit` row for its txid, and rolled back when
 * it holds an `abort` row. One with no row at all is left alone while it is younger than `inDoubtAfterMs` (its
 * coordinator may be between PREPARE and the decision); older, recovery writes an `abort` row first — the
 * tombstone — and rolls it back only once that row is committed. Why that is safe is the ordering argument at
 * the top of cross.ts; in short, the decision row and the tombstone are the same primary key on the same server,
 * so exactly one of them ever commits.
 *
 * Runs in every router (state.ts: at start and every `recoveryIntervalMs`) and from `shardflake cluster recover`;
 * any number of recoverers may run at once: committing or rolling back a gid that another one settled first
 * answers "does not exist" (42704), which counts as settled.
 *
 * Old decision rows are deleted once no server holds a prepared gid of theirs (only when every server answered):
 * commit rows after `commitRetentionMs`, abort rows after `abortRetentionMs`, which must stay well above the
 * longest a coordinator may take to decide (`MAX_DECISION_AGE_MS` in cross.ts refuses later decisions).
 */
export interface RecoveryOptions {
  /** A prepared transaction without a decision is taken for abandoned after this long (ms). */
  inDoubtAfterMs: number;
  /** How long recovery waits for a coordinator's uncommitted decision row before leaving it for later (ms). */
  lockTimeoutMs?: number;
  commitRetentionMs?: number;
  abortRetentionMs?: number;
  /** Phase events (`recover-commit`, `recover-rollback`). */
  emit?: (event: RouterEvent) => void;
}

export const RECOVERY_DEFAULTS = {
  lockTimeoutMs: 1000,
  commitRetentionMs: 10 * 60_000,
  abortRetentionMs: 24 * 3_600_000,
};

export interface PreparedGid extends Gid {
  /** The full global transaction id as pg_prepared_xacts shows it. */
  gid: string;
  /** The server that holds it prepared. */
  server: string;
  /** How long it has been prepared, in ms (now() − pg_prepared_xacts.prepared on its server). */
  ageMs: number;
}

/**
 * A prepared transaction that recovery committed or rolled back: its gid, server and the cross-shard transaction it
 * belonged to.
 */
export interface SettledGid {
  /** The global transaction id recovery settled, `sf:<cluster>:<txid>:<decision server>:<participant>`. */
  gid: string;
  /** The configured server it was prepared on. */
  server: string;
  /** The cross-server transaction it was part of (the `txid` part of the gid). */
  txid: string;
}

/** A prepared transaction left in doubt, with what its decision server says about it. */
export interface InDoubtGid extends PreparedGid {
  /** What its decision server says, or why it could not say. */
  decision: 'commit' | 'abort' | 'none' | 'unreachable' | 'unknown-server';
}

/**
 * What one pass of recovery did (`shardflake cluster recover`): the prepared transactions it committed, rolled back
 * or left waiting, and the servers that did not answer.
 */
export interface RecoveryReport {
  /** Prepared transactions whose decision was commit, committed by this pass. */
  committed: SettledGid[];
  /**
   * Prepared transactions with no commit decision (coordinator gone, or an abort), rolled back by this
   * pass.
   */
  rolledBack: SettledGid[];
  /** Left prepared for now: younger than the grace, its decision still being written, or its decision server down. */
  waiting: InDoubtGid[];
  /** Servers that did not answer (their prepared transactions wait for the next pass). */
  unreachable: {
    /** The configured server that did not answer. */
    server: string;
    /**
     * What connecting or listing its prepared transactions raised (SERVER_UNREACHABLE when it did not
     * answer).
     */
    error: ShardflakeError;
  }[];
  /** Decision rows deleted. */
  cleaned: number;
}

type Decision = 'commit' | 'abort';

async function listPrepared(
  access: ServerAccess,
  prefix: string,
): Promise<{ prepared: PreparedGid[]; unreachable: RecoveryReport['unreachable'] }> {
  const prepared: PreparedGid[] = [];
  const unreachable: RecoveryReport['unreachable'] = [];
  await Promise.all(
    access.servers.map(async (server) => {
      try {
        const { rows } = await access.use(server, (c) => c.query(LIST_PREPARED_SQL, [prefix]));
        for (const row of rows as { gid: string; age_ms: number }[]) {
          const gid = parseGid(row.gid);
          if (gid) prepared.push({ ...gid, gid: row.gid, server, ageMs: Number(row.age_ms) });
        }
      } catch (error) {
        unreachable.push({ server, error: wrapPgError(error) });
      }
    }),
  );
  return { prepared, unreachable };
}

async function readDecisions(client: Queryable, txids: readonly string[]): Promise<Map<string, Decision>> {
  try {
    const { rows } = await client.query(READ_DECISIONS_SQL, [txids]);
    return new Map((rows as { txid: string; outcome: Decision }[]).map((r) => [r.txid, r.outcome]));
  } catch (error) {
    // No decision log on this server: no transaction ever decided here.
    if ((error as { code?: string }).code === '42P01') return new Map();
    throw error;
  }
}

/**
 * Writes the tombstone for `txid` unless a decision is there, and returns the decision that stands. Undefined when
 * the coordinator's own decision row is being written right now (the unique index makes us wait; lock_timeout
 * ends the wait): the next pass will find it committed or gone.
 */
async function abortUnlessDecided(
  client: Queryable,
  txid: string,
  lockTimeoutMs: number,
): Promise<Decision | undefined> {
  await installTransactionLog(client);
  await client.query('BEGIN');
  try {
    await client.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}`);
    await client.query(INSERT_ABORT_SQL, [txid]);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    if ((error as { code?: string }).code === '55P03') return undefined;
    throw error;
  }
  return (await readDecisions(client, [txid])).get(txid);
}

/** COMMIT PREPARED or ROLLBACK PREPARED of one gid; true when settled (by us or by a recoverer before us). */
export async function finishPrepared(client: Queryable, gid: string, decision: Decision): Promise<boolean> {
  const verb = decision === 'commit' ? 'COMMIT PREPARED' : 'ROLLBACK PREPARED';
  try {
    await client.query(`${verb} ${quoteLiteral(gid)}`);
    return true;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === '42704') return true; // settled by someone else
    if (code === '55000') return false; // being settled by someone else right now ("is busy")
    throw error;
  }
}

/** Decides every prepared gid it can, then settles each on its server. */
export async function recoverTransactions(
  access: ServerAccess,
  clusterId: string,
  options: RecoveryOptions,
): Promise<RecoveryReport> {
  const lockTimeoutMs = options.lockTimeoutMs ?? RECOVERY_DEFAULTS.lockTimeoutMs;
  const { prepared, unreachable } = await listPrepared(access, gidPrefix(clusterId));
  const report: RecoveryReport = { committed: [], rolledBack: [], waiting: [], unreachable, cleaned: 0 };
  const down = new Set(unreachable.map((u) => u.server));

  // Decisions, asked of each decision server once for all its txids.
  const byDecider = new Map<string, PreparedGid[]>();
  for (const p of prepared) byDecider.set(p.decisionServer, [...(byDecider.get(p.decisionServer) ?? []), p]);
  const decided = new Map<string, Decision>();
  const waitingFor = new Map<string, InDoubtGid['decision']>();
  await Promise.all(
    [...byDecider].map(async ([decider, gids]) => {
      if (!access.servers.includes(decider)) {
        for (const g of gids) waitingFor.set(g.txid, 'unknown-server');
        return;
      }
      if (down.has(decider)) {
        for (const g of gids) waitingFor.set(g.txid, 'unreachable');
        return;
      }
      try {
        await access.use(decider, async (client) => {
          const txids = [...new Set(gids.map((g) => g.txid))];
          const found = await readDecisions(client, txids);
          for (const txid of txids) {
            let decision = found.get(txid);
            const oldest = Math.max(...gids.filter((g) => g.txid === txid).map((g) => g.ageMs));
            if (decision === undefined && oldest >= options.inDoubtAfterMs)
              decision = await abortUnlessDecided(client, txid, lockTimeoutMs);
            if (decision) decided.set(txid, decision);
            else waitingFor.set(txid, 'none');
          }
        });
      } catch (error) {
        report.unreachable.push({ server: decider, error: wrapPgError(error) });
        for (const g of gids) if (!decided.has(g.txid)) waitingFor.set(g.txid, 'unreachable');
      }
    }),
  );

  // Settle, one connection per server, its gids in order.
  const byServer = new Map<string, PreparedGid[]>();
  for (const p of prepared) byServer.set(p.server, [...(byServer.get(p.server) ?? []), p]);
  await Promise.all(
    [...byServer].map(async ([server, gids]) => {
      try {
        await access.use(server, async (client) => {
          for (const g of gids) {
            const decision = decided.get(g.txid);
            if (!decision) {
              report.waiting.push({ ...g, decision: waitingFor.get(g.txid) ?? 'none' });
              continue;
            }
            const phase: TransactionPhase = decision === 'commit' ? 'recover-commit' : 'recover-rollback';
            const started = performance.now();
            options.emit?.({ type: 'transaction', phase, step: 'start', txid: g.txid, server, gid: g.gid });
            try {
              if (!(await finishPrepared(client, g.gid, decision))) {
                report.waiting.push({ ...g, decision });
                continue;
              }
            } catch (error) {
              const e = wrapPgError(error);
              options.emit?.({
                type: 'transaction',
                phase,
                step: 'failed',
                txid: g.txid,
                server,
                gid: g.gid,
                ms: performance.now() - started,
                error: e,
              });
              throw e;
            }
            options.emit?.({
              type: 'transaction',
              phase,
              step: 'done',
              txid: g.txid,
              server,
              gid: g.gid,
              ms: performance.now() - started,
            });
            (decision === 'commit' ? report.committed : report.rolledBack).push({
              gid: g.gid,
              server,
              txid: g.txid,
            });
          }
        });
      } catch (error) {
        report.unreachable.push({ server, error: wrapPgError(error) });
      }
    }),
  );

  if (report.unreachable.length === 0) report.cleaned = await cleanDecisions(access, prepared, options);
  return report;
}

/**
 * Deletes decision rows no prepared gid needs any more. `prepared` was listed before the old rows are read: a
 * gid prepared after that listing belongs to a txid decided less than the retention ago (PREPAREs precede the
 * decision, and the coordinator refuses a decision older than MAX_DECISION_AGE_MS), so no row a gid needs goes.
 */
async function cleanDecisions(
  access: ServerAccess,
  prepared: readonly PreparedGid[],
  options: RecoveryOptions,
): Promise<number> {
  const commitMs = options.commitRetentionMs ?? RECOVERY_DEFAULTS.commitRetentionMs;
  const abortMs = options.abortRetentionMs ?? RECOVERY_DEFAULTS.abortRetentionMs;
  const live = new Set(prepared.map((p) => p.txid));
  let cleaned = 0;
  await Promise.all(
    access.servers.map(async (server) => {
      try {
        await access.use(server, async (client) => {
          const old = await client.query(OLD_DECISIONS_SQL, [commitMs, abortMs]);
          const txids = (old.rows as { txid: string }[]).map((r) => r.txid).filter((t) => !live.has(t));
          if (txids.length === 0) return;
          const done = await client.query(DELETE_DECISIONS_SQL, [txids]);
          cleaned += done.rowCount ?? 0;
        });
      } catch {
        // A server without a decision log has nothing to clean; anything else waits for the next pass.
      }
    }),
  );
  return cleaned;
}

/** This cluster's prepared transactions and what their decision servers say, changing nothing. */
export async function listInDoubt(
  access: ServerAccess,
  clusterId: string,
): Promise<{ inDoubt: InDoubtGid[]; unreachable: RecoveryReport['unreachable'] }> {
  const { prepared, unreachable } = await listPrepared(access, gidPrefix(clusterId));
  const down = new Set(unreachable.map((u) => u.server));
  const inDoubt: InDoubtGid[] = [];
  const deciders = [...new Set(prepared.map((p) => p.decisionServer))];
  const decisions = new Map<string, Map<string, Decision> | InDoubtGid['decision']>();
  await Promise.all(
    deciders.map(async (decider) => {
      if (!access.servers.includes(decider)) return decisions.set(decider, 'unknown-server');
      if (down.has(decider)) return decisions.set(decider, 'unreachable');
      const txids = prepared.filter((p) => p.decisionServer === decider).map((p) => p.txid);
      try {
        decisions.set(decider, await access.use(decider, (c) => readDecisions(c, txids)));
      } catch {
        decisions.set(decider, 'unreachable');
      }
    }),
  );
  for (const p of prepared) {
    const found = decisions.get(p.decisionServer);
    inDoubt.push({
      ...p,
      decision: found instanceof Map ? (found.get(p.txid) ?? 'none') : (found ?? 'none'),
    });
  }
  return { inDoubt, unreachable };
}

/** Every prepared transaction on the instance (any database, any origin). */
export const PREPARED_ON_INSTANCE_SQL = `SELECT gid, (extract(epoch FROM now() - prepared) * 1000)::float8 AS age_ms FROM pg_prepared_xacts`;

/** Prepared transactions (of any origin) on this server that hold locks on relations of `schemas`. */
export const PREPARED_ON_SCHEMAS_SQL = `SELECT DISTINCT p.gid, (extract(epoch FROM now() - p.prepared) * 1000)::float8 AS age_ms
  FROM pg_prepared_xacts p
  JOIN pg_locks x ON x.locktype = 'transactionid' AND x.transactionid = p.transaction
  JOIN pg_locks l ON l.virtualtransaction = x.virtualtransaction AND l.locktype = 'relation'
  JOIN pg_class c ON c.oid = l.relation
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE p.database = current_database() AND n.nspname = ANY($1::text[])`;

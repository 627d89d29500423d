/*
 * transactions/: Transactions across shards and servers (`router.withShards`): one local transaction per server,
 * two-phase commit across servers with the decision recorded before any COMMIT PREPARED.
 *
 * May import: errors, postgres, topology, catalog, telemetry, deadlocks, recovery, routing.
 */
import type pg from 'pg';
import type { ShardPlacement } from '../catalog/shards.js';
import { INSERT_DECISION_SQL } from '../catalog/transactions.js';
import type { Deadlock, TransactionTag } from '../deadlocks/detector.js';
import { ShardflakeError } from '../errors/errors.js';
import { BatchFailure, type BatchStatement, queryBatch } from '../postgres/batch.js';
import { wrapPgError } from '../postgres/connect.js';
import { quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import { formatGid, newTxid } from '../recovery/gid.js';
import type { RouterContext } from '../routing/context.js';
import { acquireOn, isConnectionLost } from '../routing/lease.js';
import {
  PendingFailure,
  type ShardSession,
  type SharedConnection,
  sendWithPending,
  sessionClient,
} from '../routing/session.js';
import { shardSearchPath } from '../routing/statements.js';
import type { TransactionPhase } from '../telemetry/events.js';
import type { OperationTrace } from '../telemetry/trace.js';
import type { NodeLease } from '../topology/nodes.js';
import { waitBoundError, watchedClient } from './waits.js';

/**
 * One transaction across shards and servers: every participant commits, or none does.
 *
 * Shards on one server share that server's one local transaction (each session switches the connection's
 * search_path to its own schema before its statements run), so a transaction on one server is a plain
 * BEGIN … COMMIT and needs no prepared transactions at all. Several servers commit with two-phase commit and the
 * "last agent" saving: every participant but one (the last agent, the first server joined) is prepared, and the
 * last agent's ordinary local transaction, which holds the decision row, is committed — that COMMIT is the
 * decision — before the prepared ones are committed.
 *
 * The protocol, in order (each numbered step starts only after the previous one is acknowledged):
 *   1. each participant runs its sessions' statements in its local transaction (BEGIN at join);
 *   2. every participant but the last agent: PREPARE TRANSACTION 'sf:<cluster>:<txid>:<last agent>:<server>',
 *      all at once;
 *   3. the last agent inserts the decision row (txid, 'commit', gids) into its own `shardflake.transactions`,
 *      inside its still open transaction, and COMMITs, in one round trip (the insert takes the restore-point lock
 *      shared until that COMMIT, so a restore point never falls between a decision and its parts: backups/): the
 *      decision row and the last agent's own writes become durable together. The insert either writes the row or
 *      fails, never writes nothing (catalog/transactions.ts), and a failed statement makes PostgreSQL skip the rest
 *      of the round trip, so the COMMIT runs only with the row in its transaction;
 *   4. COMMIT PREPARED on each prepared participant, all at once.
 * Each step's statements go out with whatever the participant still has pending (its BEGIN, deferred writes).
 * Round trips of the commit: one server, 1 (COMMIT); several, 3 in a row (PREPARE, decision + COMMIT, COMMIT
 * PREPARED), whatever the number of servers.
 * Recovery (recovery.ts, in every router and in `cluster recover`) commits a prepared gid whose txid has a
 * `commit` row on its decision server and rolls back one with an `abort` row; for a gid with no row that is older
 * than the in-doubt grace it first commits an `abort` row (a tombstone) on the decision server, then rolls back.
 *
 * Why a crash anywhere leaves nothing half-applied once recovery has run:
 * - Before step 3, nothing is committed anywhere: the local transactions die with their connections, and the
 *   prepared ones have no commit row (the decision row is uncommitted, or never written), so recovery rolls them
 *   back. The last agent's writes and the decision row are in one transaction: neither can commit without the other.
 * - The decision and the tombstone are the same primary key (txid) on the same server, so at most one of them ever
 *   commits. A coordinator that is slow rather than dead cannot commit after recovery rolled it back: its decision
 *   insert fails on the tombstone (or, when it got there first, recovery's tombstone insert waits on its
 *   uncommitted row and gives up after lock_timeout), and every gid is prepared before the decision is written,
 *   so a PREPARE that lands after a rollback is itself rolled back by a later pass.
 * - After step 3 the decision is durable on the last agent's server (its COMMIT returned), and a commit row is
 *   deleted only once no server holds a gid of its txid prepared; abort rows are kept for a day, and the decision
 *   insert fails in a transaction more than an hour old, so a deleted tombstone can never let a
 *   decision in late. Every prepared participant is then committed by step 4 or by recovery; COMMIT PREPARED of
 *   a gid someone else settled answers "does not exist" and counts as done.
 * - A prepared transaction survives a restart of its server; a server that is down only delays recovery, which
 *   never guesses: a gid whose decision server does not answer stays prepared until it does.
 * - A lost connection during step 3 leaves the outcome unknown to the caller (COMMIT_UNKNOWN, never re-run): the
 *   decision and its COMMIT share the round trip, so a loss before the insert's answer may still have committed;
 *   recovery settles every participant by the decision server's word.
 * The decision lives on a participant, never only in this process or on the catalog, which is why the catalog can
 * be down during a commit (it is read once per router for the cluster's identity).
 *
 * Not isolated: between steps 3 and 4 a reader on the last agent's server sees the commit and a reader on another
 * server does not yet. See docs/transactions.md.
 *
 * Waits: every session of the transaction carries its tag and its bounds (lock_timeout, the idle timeout), set in
 * the round trip of its BEGIN, and its statements are watched by the router's deadlock detector while they are in
 * flight (deadlocks/detector.ts says why a deadlock across servers is then always broken, and waits.ts how). A
 * transaction the detector chooses as a victim sends nothing more, is rolled back everywhere, and fails with
 * DEADLOCK; it can be chosen only before its commit begins, so never once anything is prepared.
 */
export interface CrossSession {
  /** The configured server the session runs on. */
  readonly server: string;
  /** The connection (shared with the transaction's other sessions on this server); valid only until commit. */
  readonly client: pg.PoolClient;
  query<R extends pg.QueryResultRow = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/** A session on a server that is not a shard's (reference tables): its own search_path. */
export interface ServerSession extends CrossSession {
  readonly searchPath: readonly string[];
}

export interface CrossTransaction {
  /** This transaction's id (in its gids and decision row). */
  readonly txid: string;
  /** The servers joined so far, in join order (the first is the last agent). */
  readonly servers: readonly string[];
  /** A session in the placement's shard; shards on one server share one local transaction. */
  join(placement: ShardPlacement): Promise<ShardSession>;
  /** A session on `server` with `searchPath` (schemas, validated and quoted), in that server's transaction. */
  joinServer(server: string, searchPath: readonly string[]): Promise<ServerSession>;
  /**
   * Statements in the placement's shard (schema-qualified), in one round trip with whatever the server's
   * connection has not sent yet (its BEGIN); each result in order.
   */
  batch(placement: ShardPlacement, statements: readonly BatchStatement[]): Promise<pg.QueryResult[]>;
  /**
   * A schema-qualified statement whose result nobody reads, sent with the placement's server's next statement —
   * at the latest its commit step (COMMIT, PREPARE or the decision), in the same round trip. If it fails, nothing
   * commits and the commit throws `onError(error)`.
   */
  defer(placement: ShardPlacement, statement: BatchStatement): Promise<void>;
  /** Runs at commit, in order, before anything is prepared; a hook may join more participants. */
  beforeCommit(hook: (tx: CrossTransaction) => Promise<void>): void;
  /** Commits every participant or none (see the protocol above). */
  commit(): Promise<void>;
  /** Rolls back every participant (a no-op once commit has decided). */
  rollback(): Promise<void>;
}

/** Where a transaction stands, for its caller's retry decision. */
export type CrossOutcome = 'open' | 'rolled-back' | 'committed' | 'unknown';

/** A decision may not be written in a transaction older than this (recovery.ts keeps tombstones far longer). */
export const MAX_DECISION_AGE_MS = 3_600_000;

interface Participant {
  readonly server: string;
  readonly lease: NodeLease;
  /** The connection as the sessions use it: statements watched, refused once the transaction is a victim. */
  readonly gated: pg.PoolClient;
  /** Set when the transaction was chosen as a victim while a statement waited here: the cancel's answer. */
  cancelled: Promise<boolean> | undefined;
  /** Statements of the sessions on this connection, one at a time, and the search_path it has now. */
  readonly shared: SharedConnection;
  /** The first error the connection emitted (its server went away). */
  broken: unknown;
  readonly onError: (error: unknown) => void;
  ended: boolean;
}

export interface CrossInternals extends CrossTransaction {
  /** Where the transaction stands: only `rolled-back` (or `open`) lets a caller run it again. */
  readonly outcome: CrossOutcome;
  /** DEADLOCK once the deadlock detector chose this transaction as a victim: what its caller is told. */
  readonly victim: ShardflakeError | undefined;
  /** The placement whose join or statement failed last, for the retry decision. */
  readonly failedAt: ShardPlacement | undefined;
  /** The node of a participant whose connection failed before commit (a failover). */
  readonly nodeGone: boolean;
}

function phaseEvent(
  ctx: RouterContext,
  txid: string,
  phase: TransactionPhase,
  step: 'start' | 'done' | 'failed',
  server: string,
  extra: { gid?: string; started?: number; error?: unknown } = {},
): void {
  if (!ctx.onEvent) return;
  ctx.transactions.emit({
    type: 'transaction',
    phase,
    step,
    txid,
    server,
    ...(extra.gid === undefined ? {} : { gid: extra.gid }),
    ...(extra.started === undefined ? {} : { ms: performance.now() - extra.started }),
    ...(extra.error === undefined ? {} : { error: wrapPgError(extra.error) }),
  });
}

export function openCrossTransaction(
  ctx: RouterContext,
  options: {
    trace?: OperationTrace;
    /** When the caller's first attempt began (ms since 1970), kept across re-runs (deadlocks/tag.ts). */
    born?: number;
    /**
     * Every participant READ COMMITTED, whatever its server's default (withReference: a statement must see what
     * committed while it waited for a lock, reference/write.ts).
     */
    readCommitted?: boolean;
  } = {},
): CrossInternals {
  const begin = options.readCommitted ? BEGIN_READ_COMMITTED : BEGIN;
  const txid = newTxid();
  const tag: TransactionTag = { txid, born: options.born ?? Date.now() };
  const detector = ctx.deadlocks;
  const settings = detector?.settings(tag) ?? [];
  const bounds = detector?.options ?? { lockTimeoutMs: 0, idleTimeoutMs: 0 };
  let victim: ShardflakeError | undefined;
  /** Set once the commit sends its steps or a rollback starts: from then on the detector may not choose it. */
  let settling = false;
  const participants = new Map<string, Promise<Participant>>();
  const joined: Participant[] = [];
  const hooks: ((tx: CrossTransaction) => Promise<void>)[] = [];
  let state: 'open' | 'hooks' | 'committing' | 'ended' = 'open';
  let outcome: CrossOutcome = 'open';
  let failedAt: ShardPlacement | undefined;
  let nodeGone = false;
  let multi = false;

  const closedError = () =>
    new ShardflakeError(
      'SESSION_CLOSED',
      'this cross-shard transaction has ended (its callback returned); use its sessions only inside the callback',
    );

  /** Runs an internal statement on the participant's connection in turn with its sessions' statements. */
  const inTurn = <R>(p: Participant, work: () => Promise<R>): Promise<R> => {
    const result = p.shared.tail.then(work);
    p.shared.tail = result.catch(() => {});
    return result;
  };

  /** Whether the participant's BEGIN went out (it waits in `pending` for the first statement). */
  const begun = (p: Participant) => !p.shared.pending.includes(begin);

  /**
   * The commit step's statement with everything still pending on the participant, in one round trip. `pending`
   * in the failure: a deferred statement failed, so the step did not run and the transaction is open and aborted.
   * With nothing pending it goes as one simple-protocol message, as withShard's COMMIT does (one message each way
   * instead of five).
   */
  const step = async (p: Participant, statement: BatchStatement): Promise<pg.QueryResult> =>
    p.shared.pending.length === 0 && statement.values === undefined
      ? p.lease.client.query(statement.text)
      : ((await sendWithPending(p.lease.client, p.shared, [statement]))[0] as pg.QueryResult);

  const readyForTwoPhase = (p: Participant) =>
    inTurn(p, () => ctx.transactions.ensureReady(p.server, p.lease.client));

  const participant = (server: string, firstPath: string, placement?: ShardPlacement) => {
    let entry = participants.get(server);
    if (entry) {
      // Another shard on the server's connection: it counts toward the connection's shards (warm-shards.ts).
      if (placement)
        void entry.then(
          (p) => p.lease.touch(placement.shard),
          () => {},
        );
      return entry;
    }
    entry = (async () => {
      // Joined while committing (a beforeCommit hook): from the commit pools, so that a transaction holding
      // connections never waits for one from the pools it holds (lookups/cross.ts).
      const lease = await acquireOn(
        ctx,
        server,
        { intent: 'write', shard: placement?.shard },
        state === 'hooks',
      );
      options.trace?.lease(server, lease);
      const p: Participant = {
        server,
        lease,
        gated: watchedClient(
          lease.client,
          () =>
            detector?.wait({
              tag,
              server,
              since: performance.now(),
              choose: (deadlock, cancelled) => choose(p, deadlock, cancelled),
            }) ?? noop,
          () => victim,
        ),
        cancelled: undefined,
        // BEGIN goes out with the participant's first statement (session.ts, SharedConnection), and with it, in
        // one statement, the search_path, the session's tag and its bounds.
        shared: {
          tail: Promise.resolve(),
          path: firstPath,
          pending: [begin, setLocal([['search_path', firstPath], ...settings])],
        },
        broken: undefined,
        onError: (error) => {
          p.broken ??= error;
        },
        ended: false,
      };
      lease.client.on('error', p.onError);
      joined.push(p);
      try {
        if (participants.size > 1) {
          // The transaction now spans servers: every participant must be able to prepare, checked before the
          // caller writes anything on the new one (and the first participants, when this is the second server).
          if (!multi) {
            multi = true;
            await Promise.all([
              ctx.transactions.clusterId(),
              ...joined.filter((q) => q !== p).map(async (q) => readyForTwoPhase(q)),
            ]);
          }
          await readyForTwoPhase(p);
        }
      } catch (error) {
        if (placement) failedAt = placement;
        throw error;
      }
      return p;
    })();
    participants.set(server, entry);
    return entry;
  };

  /**
   * The deadlock detector chose this transaction as a victim while a statement of it waited on `p` (see
   * deadlocks/detector.ts). Too late once the commit sends its steps or a rollback has begun: a ROLLBACK or PREPARE
   * may then be on its way, and the cancel must never reach it.
   */
  const choose = (p: Participant, deadlock: Deadlock, cancelled: Promise<boolean>): boolean => {
    if (settling) return false;
    victim ??= new ShardflakeError(
      'DEADLOCK',
      `this transaction was chosen to break a deadlock across servers ${deadlock.servers.join(', ')} (${deadlock.members.length} sessions waiting for each other's locks; it was the youngest transaction among them) and was rolled back on every server; nothing of it committed`,
      { sqlState: '40P01' },
    );
    p.cancelled = cancelled;
    return true;
  };

  /**
   * IDLE_TIMEOUT when the participant's server ended its session for sitting idle in the transaction (25P03, sent
   * by the server before it closes the connection): the session's transaction was rolled back, and whatever was
   * sent after it went idle (a COMMIT) was never run — PostgreSQL raises the timeout's FATAL before it runs a
   * command read after the timeout fired (postgres.c, ProcessInterrupts).
   */
  const idleEnded = (p: Participant, error: unknown): ShardflakeError | undefined => {
    // The 25P03 reaches the failed statement itself when it was in flight as it came, else the 'error' listener.
    const bound = waitBoundError(p.broken, p.server, bounds) ?? waitBoundError(error, p.server, bounds);
    return bound?.code === 'IDLE_TIMEOUT' ? bound : undefined;
  };

  /** The error a caller gets for `error` on participant `p`: the victim's, a wait's bound, or the database's. */
  const typed = (p: Participant, error: unknown): ShardflakeError =>
    victim ??
    waitBoundError(p.broken, p.server, bounds) ??
    waitBoundError(error, p.server, bounds) ??
    wrapPgError(error, p.lease.node);

  /**
   * The error of a failed decision insert (step 3): the txid's tombstone is there (recovery rolled the transaction
   * back), the transaction is too old to decide, or a statement of it had failed before.
   */
  const decisionError = (agent: Participant, error: unknown): ShardflakeError => {
    const state = (error as { code?: string }).code;
    if (state === '23505')
      return new ShardflakeError(
        'TRANSACTION_ABORTED',
        'the transaction took so long to commit that recovery rolled it back (its prepared parts were older than the in-doubt grace); nothing of it committed',
        { sqlState: state, cause: error },
      );
    if (state === '23502')
      return new ShardflakeError(
        'TRANSACTION_ABORTED',
        `the transaction ran for more than ${MAX_DECISION_AGE_MS / 60_000} minutes before its commit and was rolled back on every server`,
        { sqlState: state, cause: error },
      );
    if (state === '25P02') return statementFailed(agent.server);
    return typed(agent, error);
  };

  const makeSession = (p: Participant, path: string, placement?: ShardPlacement) => {
    const guarded = sessionClient(p.gated, () => state === 'open' || state === 'hooks', p.shared, path);
    return {
      server: p.server,
      get client() {
        return guarded.proxy();
      },
      async query<R extends pg.QueryResultRow>(text: string, values?: unknown[]) {
        if (!(state === 'open' || state === 'hooks')) throw closedError();
        try {
          return (await guarded.query(text, values)) as unknown as pg.QueryResult<R>;
        } catch (error) {
          if (placement) failedAt = placement;
          throw typed(p, error);
        }
      },
    };
  };

  const canJoin = () => {
    if (state !== 'open' && state !== 'hooks') throw closedError();
  };

  /** Ends a participant's use of its connection: back to the pool, or thrown away when it may be broken. */
  const release = (p: Participant, error?: unknown) => {
    if (p.ended) return;
    p.ended = true;
    p.lease.client.removeListener('error', p.onError);
    const lost = p.broken !== undefined || (error !== undefined && isConnectionLost(error, p.lease.client));
    if (lost && ctx.nodes(p.server).noteError(p.lease.node, p.broken ?? error) && outcome === 'open')
      nodeGone = true;
    p.lease.release(lost ? (p.broken ?? error) : undefined);
  };

  /**
   * ROLLBACK of a participant still in its local transaction; for a victim's, only once the detector's cancel has
   * been answered (so it cannot reach the ROLLBACK), and by closing the connection when it was not.
   */
  const rollbackLocal = async (p: Participant) => {
    if (p.ended) return;
    if (!begun(p)) return release(p);
    if (p.cancelled && !(await p.cancelled)) {
      p.ended = true;
      p.lease.client.removeListener('error', p.onError);
      p.lease.release(new Error('the cancel of a deadlock victim was not answered'));
      return;
    }
    const error = await p.lease.client.query('ROLLBACK').then(
      () => undefined,
      (e: unknown) => e ?? new Error('rollback failed'),
    );
    release(p, error);
  };

  /** ROLLBACK PREPARED of a prepared participant (on its own connection); a failure is left to recovery. */
  const rollbackPrepared = async (p: Participant, gid: string) => {
    const started = performance.now();
    phaseEvent(ctx, txid, 'rollback-prepared', 'start', p.server, { gid });
    try {
      await p.lease.client.query(`ROLLBACK PREPARED ${quoteLiteral(gid)}`);
      phaseEvent(ctx, txid, 'rollback-prepared', 'done', p.server, { gid, started });
      release(p);
    } catch (error) {
      phaseEvent(ctx, txid, 'rollback-prepared', 'failed', p.server, { gid, started, error });
      release(p, error);
      ctx.transactions.soon();
    }
  };

  const onePhase = async (p: Participant) => {
    let done: pg.QueryResult;
    try {
      done = await step(p, COMMIT);
    } catch (failure) {
      const { error, pending } = unwrap(failure);
      if (pending && !isConnectionLost(error, p.lease.client) && p.broken === undefined) {
        // A deferred statement failed: COMMIT did not run, the transaction is open and aborted.
        outcome = 'rolled-back';
        await rollbackLocal(p);
        throw typed(p, error);
      }
      const lost = p.broken !== undefined || isConnectionLost(error, p.lease.client);
      release(p, error);
      const ended = idleEnded(p, error);
      if (ended) {
        // The server ended the session while it sat idle in the transaction: before it read the COMMIT.
        outcome = 'rolled-back';
        throw ended;
      }
      if (lost) {
        outcome = 'unknown';
        throw new ShardflakeError(
          'COMMIT_UNKNOWN',
          `the connection to server ${p.server} was lost during COMMIT: the transaction may or may not have committed, and was not re-run`,
          { sqlState: (error as { code?: string }).code, cause: error },
        );
      }
      outcome = 'rolled-back';
      throw wrapPgError(error, p.lease.node);
    }
    if (done.command === 'ROLLBACK') {
      outcome = 'rolled-back';
      release(p);
      throw statementFailed(p.server);
    }
    outcome = 'committed';
    await notePosition(p);
    release(p);
  };

  const notePosition = async (p: Participant) => {
    const nodes = ctx.nodes(p.server);
    if (!nodes.hasReplicas) return;
    // Committed already: a failure to read the position must not report the commit as failed.
    const position = await nodes.positionAfterWrite(p.lease).catch(() => undefined);
    if (position !== undefined) ctx.positions.note(p.server, position);
  };

  const twoPhase = async (agent: Participant, others: Participant[]) => {
    const cluster = await ctx.transactions.clusterId();
    const gids = new Map(
      others.map((p) => [
        p,
        formatGid({ cluster, txid, decisionServer: agent.server, participant: p.server }),
      ]),
    );
    const prepared: Participant[] = [];
    let firstError: unknown;
    const fail = (error: unknown) => {
      firstError ??= error;
    };
    // Step 2: PREPARE everywhere but the last agent.
    await Promise.all(
      others.map(async (p) => {
        const gid = gids.get(p) as string;
        const started = performance.now();
        phaseEvent(ctx, txid, 'prepare', 'start', p.server, { gid });
        try {
          const done = await step(p, { text: `PREPARE TRANSACTION ${quoteLiteral(gid)}`, quiet: true });
          // PREPARE of a transaction in which a statement failed rolls it back and says so.
          if (done.command === 'ROLLBACK') {
            phaseEvent(ctx, txid, 'prepare', 'failed', p.server, { gid, started });
            release(p);
            fail(statementFailed(p.server));
            return;
          }
          prepared.push(p);
          phaseEvent(ctx, txid, 'prepare', 'done', p.server, { gid, started });
        } catch (failure) {
          const { error, pending } = unwrap(failure);
          phaseEvent(ctx, txid, 'prepare', 'failed', p.server, { gid, started, error });
          if (pending && !isConnectionLost(error, p.lease.client) && p.broken === undefined) {
            // A deferred statement failed: PREPARE did not run, the transaction is open and aborted.
            await rollbackLocal(p);
            fail(typed(p, error));
            return;
          }
          // Not prepared: its transaction is gone (or its connection, which takes the transaction with it).
          release(p, error);
          fail(idleEnded(p, error) ?? prepareError(p.server, error));
        }
      }),
    );
    const rollbackPreparedAll = () =>
      Promise.all(prepared.map((p) => rollbackPrepared(p, gids.get(p) as string)));
    if (firstError !== undefined) {
      outcome = 'rolled-back';
      await Promise.all([
        rollbackLocal(agent),
        rollbackPreparedAll(),
        ...others.filter((p) => !prepared.includes(p)).map(rollbackLocal),
      ]);
      throw firstError;
    }

    // Step 3: the decision row and the COMMIT that makes it durable, in one round trip, after what is pending.
    const started = performance.now();
    phaseEvent(ctx, txid, 'decide', 'start', agent.server);
    const before = agent.shared.pending.splice(0);
    const decision: BatchStatement = {
      text: INSERT_DECISION_SQL,
      values: [txid, [...gids.values()], MAX_DECISION_AGE_MS],
    };
    let done: pg.QueryResult;
    try {
      done = (await queryBatch(agent.lease.client, [...before, decision, COMMIT]))[
        before.length + 1
      ] as pg.QueryResult;
    } catch (failure) {
      const at = failure instanceof BatchFailure ? failure.index : before.length + 1;
      const cause = failure instanceof BatchFailure ? failure.cause : failure;
      // A deferred statement's failure is what its onError makes of it (a lookup's refused claim), as in `step`.
      const error = (at < before.length ? before[at]?.onError?.(cause) : undefined) ?? cause;
      phaseEvent(ctx, txid, 'decide', 'failed', agent.server, { started, error: cause });
      const lost = agent.broken !== undefined || isConnectionLost(cause, agent.lease.client);
      if (lost) {
        release(agent, cause);
        const ended = idleEnded(agent, cause);
        if (ended) {
          // The server ended the last agent's session while it sat idle in the transaction, before it read the
          // round trip: the decision row was never written, so nothing is decided and the prepared parts roll back.
          outcome = 'rolled-back';
          await rollbackPreparedAll();
          throw ended;
        }
        // The COMMIT may have run before the connection went: only recovery may settle the prepared parts now.
        outcome = 'unknown';
        for (const p of prepared) release(p);
        ctx.transactions.soon();
        throw new ShardflakeError(
          'COMMIT_UNKNOWN',
          `the connection to server ${agent.server} was lost while committing the decision of a transaction across servers: it may or may not have committed, and recovery will settle every server by that decision`,
          { sqlState: (cause as { code?: string }).code, cause },
        );
      }
      outcome = 'rolled-back';
      if (at <= before.length) {
        // A statement before the COMMIT failed: PostgreSQL skipped the rest, the transaction is open and aborted.
        await Promise.all([rollbackLocal(agent), rollbackPreparedAll()]);
        throw at < before.length ? typed(agent, error) : decisionError(agent, error);
      }
      // The COMMIT itself failed (a deferred constraint, a serialization check): the transaction is rolled back.
      release(agent, cause);
      await rollbackPreparedAll();
      throw wrapPgError(cause, agent.lease.node);
    }
    if (done.command === 'ROLLBACK') {
      phaseEvent(ctx, txid, 'decide', 'failed', agent.server, { started });
      outcome = 'rolled-back';
      release(agent);
      await rollbackPreparedAll();
      throw statementFailed(agent.server);
    }
    outcome = 'committed';
    phaseEvent(ctx, txid, 'decide', 'done', agent.server, { started });
    await notePosition(agent);
    release(agent);
    // Step 4: committed; what fails from here is settled by recovery, never reported as a failed transaction.
    const commits: Promise<void>[] = [];
    for (const p of prepared) {
      const gid = gids.get(p) as string;
      const begun = performance.now();
      phaseEvent(ctx, txid, 'commit-prepared', 'start', p.server, { gid });
      commits.push(
        p.lease.client.query(`COMMIT PREPARED ${quoteLiteral(gid)}`).then(
          async () => {
            phaseEvent(ctx, txid, 'commit-prepared', 'done', p.server, { gid, started: begun });
            await notePosition(p);
            release(p);
          },
          (error: unknown) => {
            phaseEvent(ctx, txid, 'commit-prepared', 'failed', p.server, { gid, started: begun, error });
            release(p, error);
            ctx.transactions.soon();
          },
        ),
      );
    }
    await Promise.all(commits);
  };

  /**
   * Before a two-phase commit, the statements deferred to the commit (a lookup's entry writes) run as ordinary
   * statements: watched by the deadlock detector, which may still choose this transaction while one waits, and
   * before any part of it is prepared. Sent with the PREPAREs instead, one could wait on a lock while another
   * server's part is already prepared: a transaction waiting on that prepared part is never a victim (nothing
   * cancels a prepared transaction), so the two would wait for each other until lock_timeout. One round trip more
   * for a transaction across servers that deferred statements; none for the others (the BEGIN and the settings
   * still ride with the PREPARE).
   */
  const runDeferred = async (all: Participant[]) => {
    const deferred = all.filter((p) => p.shared.pending.some((statement) => !statement.quiet));
    const failures = await Promise.all(
      deferred.map((p) =>
        inTurn(p, () => sendWithPending(p.gated, p.shared, [])).then(
          () => undefined,
          (failure: unknown) => typed(p, unwrap(failure).error),
        ),
      ),
    );
    const failed = failures.find((f) => f !== undefined);
    if (failed === undefined && victim === undefined) return;
    await rollbackAll();
    throw victim ?? failed;
  };

  /** Rolls back every participant still in its local transaction (none is prepared before the decision path). */
  const rollbackAll = async () => {
    settling = true;
    // Every join finishes first; one that failed after acquiring its connection still holds it.
    await Promise.allSettled(participants.values());
    // Still `open` while the participants are released: a participant whose node went away (a failover before the
    // decision) marks the transaction `nodeGone`, which lets the caller run it again.
    await Promise.all(joined.filter((p) => !p.ended).map(rollbackLocal));
    if (outcome === 'open') outcome = 'rolled-back';
  };

  const tx: CrossInternals = {
    txid,
    get servers() {
      return [...participants.keys()];
    },
    get outcome() {
      return outcome;
    },
    get victim() {
      return victim;
    },
    get failedAt() {
      return failedAt;
    },
    get nodeGone() {
      return nodeGone;
    },
    async join(placement) {
      canJoin();
      const path = shardSearchPath(placement.schema); // the shard, then the reference tables
      const p = await participant(placement.server, path, placement);
      canJoin();
      const session = makeSession(p, path, placement);
      return {
        shard: placement.shard,
        schema: placement.schema,
        server: placement.server,
        get client() {
          return session.client;
        },
        query: session.query,
      };
    },
    async joinServer(server, searchPath) {
      canJoin();
      if (!Array.isArray(searchPath) || searchPath.length === 0)
        throw new ShardflakeError(
          'INVALID_ARGUMENT',
          'joinServer needs a search_path of at least one schema',
        );
      const path = searchPath.map((s) => quoteIdent(s, 'schema')).join(', ');
      const p = await participant(server, path);
      canJoin();
      const session = makeSession(p, path);
      return {
        server,
        searchPath: [...searchPath],
        get client() {
          return session.client;
        },
        query: session.query,
      };
    },
    async batch(placement, statements) {
      canJoin();
      const path = shardSearchPath(placement.schema);
      const p = await participant(placement.server, path, placement);
      canJoin();
      try {
        return await inTurn(p, async () => {
          const switchPath =
            p.shared.path === path ? [] : [{ text: `SET LOCAL search_path TO ${path}`, quiet: true }];
          const results = await sendWithPending(p.gated, p.shared, [...switchPath, ...statements]);
          p.shared.path = path;
          return results.slice(switchPath.length);
        });
      } catch (failure) {
        failedAt = placement;
        throw typed(p, unwrap(failure).error);
      }
    },
    async defer(placement, statement) {
      canJoin();
      const p = await participant(placement.server, shardSearchPath(placement.schema), placement);
      canJoin();
      p.shared.pending.push(statement);
    },
    beforeCommit(hook) {
      canJoin();
      hooks.push(hook);
    },
    async commit() {
      if (state !== 'open') throw closedError();
      state = 'hooks';
      try {
        for (let hook = hooks.shift(); hook; hook = hooks.shift()) await hook(tx);
      } catch (error) {
        state = 'committing';
        await tx.rollback();
        throw error;
      }
      state = 'committing';
      // Joins and statements still in flight (a caller that did not await one) finish before the commit starts.
      const all = await Promise.all(participants.values());
      await Promise.all(all.map((p) => p.shared.tail));
      try {
        // Chosen as a deadlock's victim while a statement was still in flight: nothing is prepared, nothing commits.
        if (victim) {
          await rollbackAll();
          throw victim;
        }
        if (all.length > 1) await runDeferred(all);
        // From here the detector may no longer choose it (its steps may be on their way).
        settling = true;
        if (all.length === 0) outcome = 'committed';
        else if (all.length === 1) await onePhase(all[0] as Participant);
        else await twoPhase(all[0] as Participant, all.slice(1));
      } catch (error) {
        // Failed before anything was sent (the cluster's identity could not be read): nothing is prepared.
        if (outcome === 'open') await rollbackAll();
        throw error;
      } finally {
        state = 'ended';
        if (outcome === 'open') outcome = 'rolled-back';
      }
    },
    async rollback() {
      if (state === 'ended') return;
      state = 'ended';
      await rollbackAll();
    },
  };
  return tx;
}

/** A transaction that PostgreSQL rolled back at its commit step because a statement in it had failed. */
function statementFailed(server: string): ShardflakeError {
  return new ShardflakeError(
    'DATABASE_ERROR',
    `the transaction on server ${server} was rolled back: a statement in it failed and the callback went on`,
    { sqlState: '25P02' },
  );
}

const COMMIT: BatchStatement = { text: 'COMMIT', quiet: true };

/** The statement every participant's transaction starts with, sent with its first statement. */
const BEGIN: BatchStatement = { text: 'BEGIN', quiet: true };
const BEGIN_READ_COMMITTED: BatchStatement = { text: 'BEGIN ISOLATION LEVEL READ COMMITTED', quiet: true };

const noop = () => {};

/**
 * One statement that sets each parameter for the transaction (`SET LOCAL`), values as parameters. The names are
 * shardflake's own constants; the values (a quoted search_path, a tag, a duration) go as parameters.
 */
function setLocal(settings: readonly [string, string][]): BatchStatement {
  const names = settings.map(([name]) => name).join(',');
  let text = setLocalTexts.get(names);
  if (text === undefined) {
    text = `SELECT ${settings.map(([name], i) => `set_config('${name}', $${i + 1}, true)`).join(', ')}`;
    setLocalTexts.set(names, text);
  }
  return { text, values: settings.map(([, value]) => value), quiet: true };
}
/** setLocal's texts by the names they set: a handful (with or without the detector's tag and bounds). */
const setLocalTexts = new Map<string, string>();

/** A failure of sendWithPending, or of a plain query. */
function unwrap(failure: unknown): { error: unknown; pending: boolean } {
  return failure instanceof PendingFailure
    ? { error: failure.error, pending: failure.pending }
    : { error: failure, pending: false };
}

/** A PREPARE that failed: LISTEN/NOTIFY and temporary tables cannot be prepared (0A000), said plainly. */
function prepareError(server: string, error: unknown): ShardflakeError {
  const e = wrapPgError(error);
  if (e.sqlState === '0A000')
    return new ShardflakeError(
      'NOT_SUPPORTED',
      `server ${server} cannot prepare this transaction (${e.message}): a transaction across servers may not use LISTEN, NOTIFY or temporary tables`,
      { sqlState: e.sqlState, cause: error },
    );
  return new ShardflakeError(
    'TRANSACTION_ABORTED',
    `PREPARE TRANSACTION failed on server ${server}: ${e.message}; the transaction was rolled back on every server`,
    { sqlState: e.sqlState, cause: error },
  );
}

import type pg from 'pg';
import { ShardflakeError } from '../errors/errors.js';
import { checkout, createPool, describeUrl, loginRefusal, wrapPgError } from '../postgres/connect.js';
import { lsnToBigint } from './lsn.js';
import { isNodeFailure } from './node-errors.js';
import type {
  AcquireOptions,
  FailoverEvent,
  IdlePreference,
  Lsn,
  NodeLease,
  NodeRole,
  ServerNodes,
  ServerNodesOptions,
} from './nodes.js';
import { PROBE_SQL } from './roles.js';
import { DEFAULT_SHARDS_PER_CONNECTION, WarmShards } from './warm-shards.js';

/**
 * A server of several nodes (one primary, its streaming replicas) behind the router's lease interface.
 *
 * Roles are found at run time and found again when a node fails: the first acquire, and the first one after a
 * node was marked suspect (connection refused or reset, admin shutdown, a write refused as read-only, …), asks
 * every node `pg_is_in_recovery()`. While no node is the primary (the old one stopped, the HA tool not done
 * promoting yet) acquires for writes wait, asking again every `rediscoverMs`, for up to `failoverWaitMs`; then
 * they fail with NO_PRIMARY. So a failover pauses writes instead of failing them, and nothing is restarted or
 * reconfigured. shardflake follows a promotion; it never promotes a node itself.
 *
 * Reads with read-your-writes: a read that must see a write passes the write's position (`after`, from
 * `positionAfterWrite`); a replica serves it once `pg_last_wal_replay_lsn()` has reached that position, otherwise
 * the primary does. A replica's replay position and lag are remembered for `replicaCheckMs`, so a stream of
 * reads costs one extra query per replica per interval, not per read; a read whose `after` is beyond the
 * remembered position checks again on the replica's connection before using it. A replica lagging more than
 * `maxReplicaLagMs` is left alone until a later check finds it caught up.
 */

interface NodeState {
  url: string;
  node: string;
  pool: pg.Pool;
  role: NodeRole | undefined;
  /** performance.now() when the node last failed; undefined when it is not suspect. */
  suspectAt: number | undefined;
  /** What the last check of a replica found. */
  replay: { lsn: bigint; lagMs: number; checkedAt: number } | undefined;
}

/** Replay position and lag in one round trip, on the replica itself; `in_recovery` catches a promoted replica. */
const REPLICA_CHECK_SQL = `SELECT pg_is_in_recovery() AS in_recovery, pg_last_wal_replay_lsn()::text AS replay_lsn,
  CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
       ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) * 1000, 0) END::float8 AS lag_ms`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function createReplicatedServerNodes(
  name: string,
  urls: readonly string[],
  options: ServerNodesOptions = {},
): ServerNodes {
  const maxLagMs = options.maxReplicaLagMs ?? 10_000;
  const checkMs = options.replicaCheckMs ?? 1000;
  const failoverWaitMs = options.failoverWaitMs ?? 15_000;
  const rediscoverMs = options.rediscoverMs ?? 250;
  const suspectMs = options.suspectMs ?? 1000;
  const warm = new WarmShards(options.shardsPerConnection ?? DEFAULT_SHARDS_PER_CONNECTION);
  const emit = (event: FailoverEvent) => {
    try {
      options.onEvent?.(event);
    } catch {
      // an observer never changes what the router does
    }
  };
  const nodes: NodeState[] = urls.map((url) => ({
    url,
    node: describeUrl(url),
    pool: createPool(url, {
      max: options.poolSize ?? 10,
      connectTimeoutMs: options.connectTimeoutMs,
      applicationName: options.applicationName ?? 'shardflake router',
      maxUses: options.maxUses,
      maxLifetimeSeconds: options.maxLifetimeSeconds,
    }),
    role: undefined,
    suspectAt: undefined,
    replay: undefined,
  }));
  let primary: NodeState | undefined;
  let discovering: Promise<NodeState> | undefined;
  let nextReplica = 0;
  let ended = false;
  const guarded = new WeakSet<pg.PoolClient>();

  function markSuspect(state: NodeState, error: unknown): void {
    const first = state.suspectAt === undefined;
    state.suspectAt = performance.now();
    state.replay = undefined;
    if (state === primary) primary = undefined;
    if (first)
      emit({ type: 'node-suspect', server: name, node: state.node, error: wrapPgError(error, state.url) });
  }

  /** Asks every node its role until exactly one primary answers, or the failover wait is over. */
  async function discover(): Promise<NodeState> {
    const deadline = performance.now() + failoverWaitMs;
    for (;;) {
      const refusals: { url: string; error: unknown }[] = [];
      const answers = await Promise.all(
        nodes.map(async (state) => {
          try {
            const row = (await state.pool.query(PROBE_SQL)).rows[0] as { in_recovery: boolean };
            state.role = row.in_recovery ? 'replica' : 'primary';
            state.suspectAt = undefined;
            return state;
          } catch (error) {
            if (loginRefusal(error) !== undefined) refusals.push({ url: state.url, error });
            markSuspect(state, error);
            return undefined;
          }
        }),
      );
      // Every node refused the login: no failover will change that, so it is said now, not after the wait.
      const refused = refusals[0];
      if (refused && refusals.length === nodes.length) throw wrapPgError(refused.error, refused.url);
      const primaries = answers.filter((s): s is NodeState => s?.role === 'primary');
      if (primaries.length === 1) {
        primary = primaries[0] as NodeState;
        emit({ type: 'roles-found', server: name, node: primary.node, primary: primary.node });
        return primary;
      }
      if (ended || performance.now() + rediscoverMs > deadline) {
        // Two primaries is a split brain (an old primary back up without being rewound): writing to either could
        // lose data, so no write goes anywhere until the HA tool has settled it.
        const why =
          primaries.length > 1
            ? `${primaries.length} nodes claim to be the primary (${primaries.map((p) => p.node).join(', ')})`
            : `no node answered as the primary within ${failoverWaitMs} ms (${nodes.map((n) => `${n.node}: ${n.suspectAt === undefined ? (n.role ?? 'unknown') : 'unreachable'}`).join(', ')})`;
        throw new ShardflakeError('NO_PRIMARY', `server ${name}: ${why}`);
      }
      await sleep(rediscoverMs);
    }
  }

  function findPrimary(): Promise<NodeState> {
    if (primary) return Promise.resolve(primary);
    discovering ??= discover().finally(() => {
      discovering = undefined;
    });
    return discovering;
  }

  /**
   * A pooled client may emit 'error' while it is checked out and no query runs (a fast shutdown's 57P01 arrives on
   * its own) or just after it was released with an error and is being closed. pg-pool listens only while a client
   * is idle, so every client we ever check out keeps a listener of its own for the rest of its life: an error with
   * no listener would crash the host process.
   */
  function guard(client: pg.PoolClient): pg.PoolClient {
    if (!guarded.has(client)) {
      guarded.add(client);
      client.on('error', () => {});
    }
    return client;
  }

  function lease(state: NodeState, client: pg.PoolClient, role: NodeRole, started: number): NodeLease {
    // The pool listens for errors only on idle clients. A leased client whose node goes away between two queries
    // (a fast shutdown's 57P01 arrives while no query is running) emits 'error' with nobody listening, which
    // would crash the application: listen while leased, and take it as a sign the node is gone.
    const onError = (error: Error) => markSuspect(state, error);
    client.on('error', onError);
    return {
      client,
      node: state.node,
      role,
      waitMs: performance.now() - started,
      touch: (shards) => warm.touch(client, shards),
      release: (error?: unknown) => {
        client.removeListener('error', onError);
        client.release(error instanceof Error ? error : error !== undefined || warm.spent(client));
      },
    };
  }

  async function acquirePrimary(started: number, want: IdlePreference): Promise<NodeLease> {
    // A connect that fails marks the primary suspect and finds the roles again; the discovery's own wait bounds
    // the loop, and the attempt count keeps a node that answers probes but refuses pool connections from spinning.
    for (let attempt = 1; ; attempt++) {
      const state = await findPrimary();
      try {
        warm.prefer(state.pool, want);
        return lease(state, guard(await checkout(state.pool)), 'primary', started);
      } catch (error) {
        if (!isNodeFailure(error) || attempt >= 3) throw wrapPgError(error, state.url);
        markSuspect(state, error);
      }
    }
  }

  /** A replica that may serve a read now: not suspect or lagging at its last check (or that check is old). */
  function replicaCandidates(now: number): NodeState[] {
    return nodes.filter(
      (n) =>
        n.role === 'replica' &&
        (n.suspectAt === undefined || now - n.suspectAt > suspectMs) &&
        (n.replay === undefined || n.replay.lagMs <= maxLagMs || now - n.replay.checkedAt > checkMs),
    );
  }

  async function acquireReplica(
    after: bigint | undefined,
    started: number,
    want: IdlePreference,
  ): Promise<NodeLease | undefined> {
    const candidates = replicaCandidates(performance.now());
    for (let i = 0; i < candidates.length; i++) {
      const state = candidates[(nextReplica + i) % candidates.length] as NodeState;
      let client: pg.PoolClient;
      try {
        warm.prefer(state.pool, want);
        client = guard(await checkout(state.pool));
      } catch (error) {
        markSuspect(state, error);
        continue;
      }
      try {
        const known = state.replay;
        const stale = known === undefined || performance.now() - known.checkedAt > checkMs;
        if (stale || (after !== undefined && known.lsn < after)) {
          const row = (await client.query(REPLICA_CHECK_SQL)).rows[0] as {
            in_recovery: boolean;
            replay_lsn: string | null;
            lag_ms: number;
          };
          if (!row.in_recovery) {
            // Promoted under us: the roles changed, so find them again before anyone writes.
            client.release();
            state.role = 'primary';
            if (primary)
              markSuspect(primary, new ShardflakeError('NO_PRIMARY', `${state.node} was promoted`));
            continue;
          }
          state.replay = {
            lsn: row.replay_lsn === null ? 0n : lsnToBigint(row.replay_lsn),
            lagMs: row.lag_ms,
            checkedAt: performance.now(),
          };
        }
        const replay = state.replay as NonNullable<NodeState['replay']>;
        if (replay.lagMs > maxLagMs || (after !== undefined && replay.lsn < after)) {
          client.release();
          continue;
        }
        nextReplica = (nextReplica + i + 1) % Math.max(1, candidates.length);
        return lease(state, client, 'replica', started);
      } catch (error) {
        client.release(error instanceof Error ? error : true);
        if (isNodeFailure(error)) markSuspect(state, error);
        else throw wrapPgError(error, state.url);
      }
    }
    return undefined;
  }

  return {
    name,
    hasReplicas: true,
    async acquire({ intent, after, ...want }: AcquireOptions): Promise<NodeLease> {
      if (ended) throw new ShardflakeError('INVALID_ARGUMENT', `server ${name}: its connections were closed`);
      const started = performance.now();
      if (intent === 'read') {
        // Roles must be known before a replica can be told from the primary.
        if (nodes.every((n) => n.role === undefined)) await findPrimary();
        const served = await acquireReplica(
          after === undefined ? undefined : lsnToBigint(after),
          started,
          want,
        );
        if (served) return served;
      }
      return acquirePrimary(started, want);
    },
    async positionAfterWrite(held: NodeLease): Promise<Lsn | undefined> {
      // The insert position, not the write or flush position: right after a commit it is at or beyond the end of
      // the commit record in every configuration (with synchronous_commit = off the commit may not even be written
      // yet), so a replica that has replayed up to it has replayed the commit. It may lie a little beyond (other
      // sessions' records), which costs at most a read served by the primary, never a stale read.
      const row = (await held.client.query('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0] as {
        lsn: string;
      };
      return row.lsn;
    },
    noteError(node: string, error: unknown): boolean {
      if (!isNodeFailure(error)) return false;
      const state = nodes.find((n) => n.node === node);
      if (state) markSuspect(state, error);
      return true;
    },
    async end() {
      ended = true;
      await Promise.all(nodes.map((n) => n.pool.end().catch(() => {})));
    },
  };
}

import { clusterHistory } from '../admin/migrations.js';
import { MIGRATIONS_TABLE, shardsCreationSql } from '../admin/shard-ddl.js';
import { readAdoptionRouting } from '../catalog/adopt.js';
import {
  createBatch,
  installMoves,
  type MoveRecord,
  reached,
  streamId,
  unfinishedBatch,
  unfinishedMoves,
} from '../catalog/moves.js';
import { recordServers } from '../catalog/servers.js';
import { readPlacements, setShardsState } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import { isShardflakeError, ShardflakeError } from '../errors/errors.js';
import { fencesSql } from '../fence/fence.js';
import { lockShard, unlockShard } from '../fence/shard-lock.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { settlePreparedOnShards } from '../recovery/settle.js';
import { ensureReferenceOn } from '../reference/before-move.js';
import { primaryUrl } from '../topology/connections.js';
import { checkMoveList, preflightSet } from './checks.js';
import { inTransaction, MoveInterrupted, openServer, sleep } from './connections.js';
import { cutoverGroup, cutoverGroups } from './cutover.js';
import { guardSchemas, requireGuardable } from './ddl-guard.js';
import { finishMembers } from './finish.js';
import { DEFAULTS, type MoveResult, SET_DEFAULTS, type SetMoveOptions } from './options.js';
import {
  createPublication,
  createSubscription,
  currentLsn,
  dropSlots,
  replicationNames,
  subscriptionOid,
  subscriptionProgress,
} from './replication.js';
import { checkReplicationLimits } from './replication-limits.js';
import { advanceAll, checkpoint, describe, type Member, pending, type Run, round } from './run.js';
import { rollBackMove, settleMove } from './settle.js';
import { copyAtSnapshot } from './snapshot-copy.js';
import { listTables, listTablesOfSchemas, type SourceTable, tablesWithRows } from './tables.js';
import { buildDeferredIndexesOf, deferrableIndexesOf } from './target-schema.js';

export { checkMoveList, checkSetOptions, checkShardList } from './checks.js';
export { cutoverGroups } from './cutover.js';

/**
 * The one move engine. A move takes a set of shards from one server to another (a single shard's move is a set of
 * one) through the phases of catalog/moves.ts, each recorded per shard in `shardflake.moves` after it happened:
 *
 * - prepare: empty, fenced target copies made from the config's templates; one publication on the source
 *   (`FOR TABLES IN SCHEMA` every shard of the set); the DDL guard on the source's schemas.
 * - copy: one replication slot, one copy of every table at the slot's snapshot (snapshot-copy.ts), the deferred
 *   indexes, then one subscription streaming from that slot (one WAL sender, one apply worker for the set).
 * - catch up: the apply worker has received the source's WAL up to a recent LSN.
 * - cutover (cutover.ts), in groups that share one write pause: lock, verify, raise generators, fence, commit,
 *   switch.
 * - finish: the fences checked, then subscription, publication and slot dropped once every shard has switched.
 *
 * Each step starts by looking at what exists, so a rerun after a crash resumes the set (the shards that switched
 * stay switched; the others continue), and `cluster cleanup` settles each shard (settle.ts). A failure before a
 * shard's switch rolls back every shard of the set that has not switched (they share the stream that failed); the
 * shards that did switch are finished. Objects are named after the stream id: the set's batch id, or the move's
 * own id for a move of one shard (`sf_move_<id>`).
 */
// ---------------------------------------------------------------------------------------------------- phases

/** planned → prepared: empty, fenced target copies (many per transaction), the set's publication, the DDL guard. */
async function prepare(s: Run): Promise<void> {
  const todo = pending(s, 'planned');
  if (todo.length === 0) return;
  // Checked before the target copies and the publication, so a role that cannot guard the source gets one line
  // naming what it lacks instead of a failure halfway.
  await requireGuardable(s.source);
  const CHUNK = 64;
  for (let i = 0; i < todo.length; i += CHUNK) {
    const chunk = todo.slice(i, i + CHUNK);
    const schemas = chunk.map((m) => m.record.schema);
    await inTransaction(s.target, async () => {
      // Only this set, killed before recording `prepared`, can have made these: preflight refused any copy on
      // the target, and before the switch the catalog places the shard on the source.
      await s.target.query(
        schemas.map((schema) => `DROP SCHEMA IF EXISTS ${quoteIdent(schema, 'schema')} CASCADE`).join(';\n'),
      );
      await s.target.query(
        shardsCreationSql(
          s.config,
          chunk.map((m) => ({ shard: m.record.shard, schema: m.record.schema })),
        ),
      );
      const made = await listTablesOfSchemas(s.target, schemas);
      for (const m of chunk) {
        const tables = made.get(m.record.schema) ?? [];
        const differ = m.tables.filter((t) => tables.find((u) => u.name === t.name)?.shape !== t.shape);
        if (differ.length > 0 || tables.length !== m.tables.length) {
          throw new ShardflakeError(
            'MOVE_FAILED',
            `the tables the config creates differ from shard ${m.record.shard}'s tables on server ${s.from} (${differ.map((t) => t.name).join(', ') || 'a different set of tables'}); was DDL run outside cluster migrate?`,
          );
        }
      }
      const indexes = await deferrableIndexesOf(s.target, schemas);
      const filled = await tablesWithRows(
        s.target,
        chunk.flatMap((m) =>
          m.tables.filter((t) => t.name !== MIGRATIONS_TABLE).map((t) => qualified(m.record.schema, t.name)),
        ),
      );
      await s.target.query(
        [
          // The copy brings the source's rows. The new copies' tables are empty but for the migrations table (and
          // whatever a migration inserted): a TRUNCATE of every table scanned the whole buffer pool once per
          // relation and rebuilt every index, as long as making the copies.
          ...chunk.map((m) => `DELETE FROM ${qualified(m.record.schema, MIGRATIONS_TABLE)}`),
          ...(filled.length > 0 ? [`TRUNCATE ${filled.join(', ')}`] : []),
          ...indexes.map((index) => `DROP INDEX ${qualified(index.schema, index.name)}`),
          fencesSql(
            chunk.map((m) => ({
              schema: m.record.schema,
              tables: m.tables.map((t) => t.name),
              message: `shard ${m.record.shard} is being copied to this server by move #${m.record.id}; it stays on server ${s.from} until the move switches`,
            })),
          ),
        ].join(';\n'),
      );
    });
  }
  await createPublication(
    s.source,
    s.names.publication,
    s.members.map((m) => m.record.schema),
  );
  await guardSchemas(
    s.source,
    s.members.map((m) => m.record.schema),
    s.streamId,
  );
  await advanceAll(s, todo, 'prepared');
}

/** Copy progress, as rows of the whole set (onSetProgress) and, under the first shard's name, onProgress. */
function reportCopy(s: Run, rows: number, total: number): void {
  s.opts.onSetProgress?.({ from: s.from, to: s.to, phase: 'copying', done: rows, total });
  const first = s.members[0] as Member;
  s.opts.onProgress?.({
    shard: first.record.shard,
    moveId: first.record.id,
    phase: 'copying',
    copiedRows: BigInt(rows),
    totalRows: BigInt(total),
  });
}

/**
 * prepared → subscribed: the slot with its snapshot, the copy of every table at that snapshot, the deferred
 * indexes, then the subscription on that slot without a copy of its own. A run killed during the copy left a
 * partial copy and a slot whose snapshot is gone: both are thrown away and the copy starts again.
 */
async function copyAndSubscribe(s: Run): Promise<void> {
  const todo = pending(s, 'prepared');
  if (todo.length === 0) return;
  let oid = await subscriptionOid(s.target, s.names.subscription);
  if (oid === null) {
    // The slot waits for every transaction running on the source, in-doubt prepared ones too.
    await settlePreparedOnShards(s.config, s.from, 'all', { failWith: 'MOVE_FAILED' });
    await dropSlots(s.source, s.names.slot, null);
    await inTransaction(s.target, async () => {
      await s.target.query('SET LOCAL session_replication_role = replica');
      // Only what an earlier copy left: prepare leaves the new copies empty, and a TRUNCATE of every table of the
      // set gave each table a new file and rebuilt its indexes even when all were empty.
      const filled = await tablesWithRows(
        s.target,
        s.members.flatMap((m) => m.tables.map((t) => qualified(m.record.schema, t.name))),
      );
      if (filled.length > 0) await s.target.query(`TRUNCATE ${filled.join(', ')}`);
    });
    const totalRows = Number(s.members.reduce((n, m) => n + m.rows, 0n));
    s.copy = await copyAtSnapshot({
      sourceUrl: await primaryUrl(s.config, s.from),
      targetUrl: await primaryUrl(s.config, s.to),
      slot: s.names.slot,
      tables: s.members.flatMap((m) => m.tables.map((t) => ({ schema: m.record.schema, table: t.name }))),
      workers: s.opts.copyWorkers,
      throttle: s.opts.throttle,
      stopped: () => s.opts.signal?.aborted === true,
      onProgress: (rows) => reportCopy(s, rows, totalRows),
    });
    await checkpoint(s, null);
    for (const m of s.members) {
      m.rows = BigInt(
        m.tables.reduce((n, t) => n + (s.copy?.perTable.get(`${m.record.schema}.${t.name}`) ?? 0), 0),
      );
    }
    await buildDeferredIndexesOf(
      s.source,
      s.target,
      s.members.map((m) => m.record.schema),
    );
    oid = await createSubscription(s.target, s.names, await primaryUrl(s.config, s.from), s.opts.replication);
  }
  await advanceAll(s, todo, 'subscribed', { subscriptionOid: oid as bigint });
}

/** subscribed → synced: the one apply worker has received the source's WAL up to a recent LSN. */
async function waitSynced(s: Run): Promise<void> {
  const todo = pending(s, 'subscribed');
  if (todo.length === 0) return;
  const started = performance.now();
  const lsn = await currentLsn(s.source);
  const deadline = started + s.opts.syncTimeoutMs;
  for (;;) {
    await checkpoint(s, null);
    const p = await subscriptionProgress(s.target, s.names.subscription, lsn);
    if (p.errors > 0) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the subscription of ${describe(s)} reported ${p.errors} error(s); see server ${s.to}'s log`,
      );
    }
    if (p.receivedUpTo) break;
    if (performance.now() > deadline) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `${describe(s)} did not catch up within ${s.opts.syncTimeoutMs} ms`,
      );
    }
    await sleep(s.opts.pollMs);
  }
  s.catchUpMs = performance.now() - started;
  await advanceAll(s, todo, 'synced');
}

async function timed(s: Run, name: string, work: () => Promise<void>): Promise<void> {
  const t = performance.now();
  try {
    await work();
  } finally {
    s.steps[name] = round((s.steps[name] ?? 0) + performance.now() - t);
  }
}

async function drive(s: Run): Promise<void> {
  await timed(s, 'prepare', () => prepare(s));
  await timed(s, 'copy', () => copyAndSubscribe(s));
  await timed(s, 'catchUp', () => waitSynced(s));
  const cutting = s.members.filter((m) => m.record.phase === 'synced' || m.record.phase === 'fenced');
  const groups = cutoverGroups(cutting, s.opts.cutoverGroupShards, s.opts.cutoverGroupRows);
  let switched = s.members.filter((m) => reached(m.record.phase, 'switched')).length;
  for (const group of groups) {
    await timed(s, 'cutover', () => cutoverGroup(s, group));
    switched += group.length;
    s.opts.onSetProgress?.({
      from: s.from,
      to: s.to,
      phase: 'switching',
      done: switched,
      total: s.members.length,
    });
  }
  await timed(s, 'finish', () => finishMembers(s, s.members));
}

// ---------------------------------------------------------------------------------------------------- entry

function result(s: Run, m: Member): MoveResult {
  const copyMs = s.copy?.ms ?? null;
  return {
    moveId: m.record.id,
    shard: m.record.shard,
    schema: m.record.schema,
    from: s.from,
    to: s.to,
    resumedFrom: m.resumedFrom,
    rows: m.rows,
    tables: m.tables.length,
    copyMs,
    indexAndCatchUpMs: s.catchUpMs,
    rowsPerSecond: s.copy && copyMs ? Math.round((s.copy.rows * 1000) / copyMs) : null,
    pauseMs: m.pauseMs,
    pauseSteps: m.pauseSteps,
    verify: s.opts.verify,
    snapshotPauseMs: m.snapshot?.pauseMs ?? null,
    snapshotCompareMs: m.snapshot?.compareMs ?? null,
    mapVersion: m.mapVersion,
    batchId: s.batchId,
    setSteps: s.steps,
  };
}

/**
 * Runs one set (fresh or resumed) whose shards this process has locked. On failure, rolls back the shards that
 * have not switched and finishes those that have.
 */
async function runSet(
  config: ClusterConfig,
  opts: Run['opts'],
  records: MoveRecord[],
  tablesOf: Map<number, SourceTable[]>,
  resumed: boolean,
): Promise<MoveResult[]> {
  const first = records[0] as MoveRecord;
  const id = streamId(first);
  // A connection of its own for the set's catalog transactions: sets may run side by side, and the shard locks
  // stay on the caller's connection.
  const catalog = await openServer(config, config.catalog, opts.pauseBoundMs);
  const source = await openServer(config, first.from, opts.pauseBoundMs).catch(async (error) => {
    await catalog.end().catch(() => {});
    throw error;
  });
  const target = await openServer(config, first.to, opts.pauseBoundMs).catch(async (error) => {
    await Promise.all([source.end().catch(() => {}), catalog.end().catch(() => {})]);
    throw error;
  });
  const s: Run = {
    config,
    opts,
    catalog,
    source,
    target,
    from: first.from,
    to: first.to,
    streamId: id,
    batchId: first.batchId,
    names: replicationNames(id),
    members: [],
    copy: null,
    catchUpMs: null,
    steps: {},
  };
  try {
    // Rows per shard, estimated until the copy counts them: they size the cutover groups.
    const { rows: estimates } = await source.query(
      'SELECT schemaname AS schema, sum(n_live_tup)::bigint AS n FROM pg_stat_user_tables WHERE schemaname = ANY($1::text[]) GROUP BY 1',
      [records.map((r) => r.schema)],
    );
    const estimated = new Map(
      (estimates as { schema: string; n: bigint }[]).map((r) => [r.schema, BigInt(r.n)]),
    );
    for (const record of records) {
      const tables = tablesOf.get(record.shard) ?? (await listTables(source, record.schema));
      s.members.push({
        record,
        tables,
        resumedFrom: resumed ? record.phase : null,
        rows: estimated.get(record.schema) ?? 0n,
        pauseMs: null,
        pauseSteps: {},
        mapVersion: 0n,
        snapshot: null,
      });
    }
    if (!resumed) await checkpoint(s, 'planned');
    try {
      await drive(s);
    } catch (error) {
      if (error instanceof MoveInterrupted) throw error;
      const reason = isShardflakeError(error) ? error.message : wrapPgError(error).message;
      const back = s.members.filter(
        (m) => !reached(m.record.phase, 'switched') && m.record.phase !== 'rolled_back',
      );
      const undone: Member[] = [];
      const left: string[] = [];
      const problems: string[] = [];
      const unfinished: string[] = [];
      for (const m of back) {
        await rollBackMove(config, catalog, m.record, reason).then(
          (leftovers) => {
            undone.push(m);
            left.push(...leftovers);
          },
          (e: unknown) => problems.push(`shard ${m.record.shard}: ${(e as Error).message}`),
        );
      }
      const forward = s.members.filter((m) => m.record.phase === 'switched');
      if (forward.length > 0) {
        await finishMembers(s, forward).catch((e: unknown) => unfinished.push((e as Error).message));
      }
      throw new ShardflakeError(
        'MOVE_FAILED',
        failureMessage(s, reason, { undone, forward, left, problems, unfinished }),
        {
          cause: error,
        },
      );
    }
    return s.members.map((m) => result(s, m));
  } finally {
    await Promise.all([source, target, catalog].map((c) => c.end().catch(() => {})));
  }
}

/**
 * What a failed run says, in one line: what failed and why, which shards were rolled back (and stay on the source),
 * which had switched (and were finished on the target), what was left behind for `cluster cleanup`, and what could
 * not be undone yet.
 */
function failureMessage(
  s: Run,
  reason: string,
  o: { undone: Member[]; forward: Member[]; left: string[]; problems: string[]; unfinished: string[] },
): string {
  const list = (ms: readonly Member[]) => ms.map((m) => m.record.shard).join(', ');
  const one = s.members.length === 1;
  const what = one
    ? `move of shard ${list(s.members)} to server ${s.to}`
    : `moving shards ${list(s.members)} to server ${s.to}`;
  const parts: string[] = [];
  if (one && o.undone.length === 1) {
    parts.push(
      `${what} failed and was rolled back (shard ${list(o.undone)} stays on server ${s.from}): ${reason}`,
    );
  } else if (o.undone.length === s.members.length) {
    parts.push(
      `${what} failed and was rolled back (shards ${list(o.undone)} stay on server ${s.from}): ${reason}`,
    );
  } else {
    parts.push(`${what} failed: ${reason}`);
    if (o.undone.length > 0)
      parts.push(`shards ${list(o.undone)} were rolled back and stay on server ${s.from}`);
  }
  if (o.forward.length > 0)
    parts.push(
      o.forward.length === 1
        ? `shard ${list(o.forward)} had switched and now lives on server ${s.to}`
        : `shards ${list(o.forward)} had switched and now live on server ${s.to}`,
    );
  if (o.left.length > 0) parts.push(`left behind: ${o.left.join('; ')}`);
  if (o.problems.length > 0) {
    // Past the fence the source refuses writes: a shard whose undoing failed there is served by no one until a
    // rerun or cleanup settles it; before the fence the source still serves it.
    const fenced = s.members
      .filter((m) => m.record.phase === 'fenced' && !o.undone.includes(m))
      .map((m) => m.record.shard);
    const state =
      fenced.length > 0
        ? `shard ${fenced.join(', ')} refuses writes (fenced on server ${s.from}, not switched to ${s.to}) until then`
        : `the shard is still served by server ${s.from}`;
    parts.push(
      `not yet undone: ${o.problems.join('; ')} (${state}; the copies made on server ${s.to} stay there until then); run the command again or shardflake cluster cleanup`,
    );
  }
  if (o.unfinished.length > 0) {
    // Switched shards are served by the target; only their replication objects and the source's seal remain.
    parts.push(
      `not yet finished: ${o.unfinished.join('; ')} (the switched shards are served by server ${s.to}; what is left of the move on servers ${s.from} and ${s.to} stays until a rerun or shardflake cluster cleanup)`,
    );
  }
  return parts.join('; ');
}

function owner(opts: SetMoveOptions): string {
  return opts.owner ?? `${process.env.HOSTNAME ?? 'localhost'}:${process.pid}`;
}

interface PlannedSet {
  from: string;
  to: string;
  records: MoveRecord[];
  tables: Map<number, SourceTable[]>;
  resumed: boolean;
}

/**
 * Runs sets side by side, at most `streamsPerServer` replication streams on any server at a time (a set is one
 * stream on its source and one on its target); a set starts as soon as both its servers have room.
 */
async function runSideBySide(
  config: ClusterConfig,
  opts: Run['opts'],
  sets: readonly PlannedSet[],
): Promise<{ results: MoveResult[]; errors: unknown[] }> {
  const busy = new Map<string, number>();
  const room = (server: string) => (busy.get(server) ?? 0) < opts.streamsPerServer;
  const waiting = [...sets];
  const running = new Set<Promise<void>>();
  const results: MoveResult[] = [];
  const errors: unknown[] = [];
  while (waiting.length > 0 || running.size > 0) {
    const i = waiting.findIndex((set) => room(set.from) && room(set.to));
    if (i !== -1 && errors.length === 0) {
      const set = waiting.splice(i, 1)[0] as PlannedSet;
      busy.set(set.from, (busy.get(set.from) ?? 0) + 1);
      busy.set(set.to, (busy.get(set.to) ?? 0) + 1);
      const run: Promise<void> = runSet(config, opts, set.records, set.tables, set.resumed)
        .then(
          (r) => {
            results.push(...r);
          },
          (e: unknown) => {
            errors.push(e);
          },
        )
        .finally(() => {
          busy.set(set.from, (busy.get(set.from) ?? 1) - 1);
          busy.set(set.to, (busy.get(set.to) ?? 1) - 1);
          running.delete(run);
        });
      running.add(run);
      continue;
    }
    if (running.size === 0) break; // an error stopped new sets from starting
    await Promise.race(running);
  }
  return { results, errors };
}

/**
 * Moves each listed shard to its target: shards from the same source to the same target move as one set, and sets
 * of distinct server pairs run side by side (`streamsPerServer`). Interrupted sets among them are resumed whole.
 * Returns one result per listed shard, in the order given.
 */
export async function moveSets(
  config: ClusterConfig,
  moves: readonly { shard: number; to: string }[],
  options: SetMoveOptions = {},
): Promise<MoveResult[]> {
  checkMoveList(config, moves, options);
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
  const opts = { ...DEFAULTS, ...SET_DEFAULTS, ...given } as Run['opts'];
  const targetOf = new Map(moves.map((m) => [m.shard, m.to]));
  const shards = moves.map((m) => m.shard);
  const catalog = await openServer(config, config.catalog);
  const locked: number[] = [];
  const lock = async (shard: number) => {
    if (locked.includes(shard)) return;
    await lockShard(catalog, shard);
    locked.push(shard);
  };
  try {
    // The target copies are made from the cluster's recorded history, not from whatever the config still lists.
    config = await clusterHistory(catalog, config);
    await installMoves(catalog);
    if ((await readAdoptionRouting(catalog))?.servingFromSource)
      throw new ShardflakeError(
        'SHARD_BUSY',
        'this cluster is adopting a live database (cluster adopt): its shards move only after the cutover',
      );
    // Routers on an older config learn the servers of this move from the catalog (catalog/servers.ts).
    await recordServers(catalog, config.nodes);
    for (const shard of [...shards].sort((a, b) => a - b)) await lock(shard);

    // Unfinished moves of these shards: sets towards the same target are resumed whole (every shard of the set,
    // listed or not); anything else is settled first (finished if it switched, rolled back if not).
    const resumedSets = new Map<bigint, MoveRecord[]>();
    for (const record of await unfinishedMoves(catalog, shards)) {
      const id = streamId(record);
      if (resumedSets.has(id)) continue;
      const members = record.batchId !== null ? await unfinishedBatch(catalog, record.batchId) : [record];
      for (const m of members) await lock(m.shard);
      if (record.to === targetOf.get(record.shard)) {
        resumedSets.set(id, members);
      } else {
        for (const m of members) {
          await settleMove(
            config,
            catalog,
            m,
            `superseded by a move to server ${targetOf.get(record.shard)}`,
          );
        }
      }
    }
    const resumedShards = new Set([...resumedSets.values()].flat().map((m) => m.shard));
    const fresh = shards.filter((n) => !resumedShards.has(n));
    const placements = await readPlacements(catalog, fresh);
    const there = fresh.filter((n) => placements.get(n)?.server === targetOf.get(n));
    if (there.length > 0) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        moves.length === 1
          ? `shard ${there[0]} is already on server ${targetOf.get(there[0] as number)}; nothing to move`
          : there.length === 1
            ? `server ${targetOf.get(there[0] as number)} already holds shard ${there[0]}; nothing was moved (leave it out of the list)`
            : `shards ${there.join(', ')} are already on their target server; nothing was moved (leave them out of the list)`,
      );
    }

    // Reference tables complete on every target before any shard is recorded as moving there (SPEC G2).
    for (const to of new Set(fresh.map((n) => targetOf.get(n) as string)))
      await ensureReferenceOn(config, to);

    // Fresh sets, one per (source, target) pair: every shard checked, and the servers' replication limits, before
    // any is recorded.
    const byPair = new Map<string, { from: string; to: string; shards: number[] }>();
    for (const shard of fresh) {
      const from = (placements.get(shard) as { server: string }).server;
      const to = targetOf.get(shard) as string;
      const key = JSON.stringify([from, to]);
      const pair = byPair.get(key) ?? { from, to, shards: [] };
      pair.shards.push(shard);
      byPair.set(key, pair);
    }
    const sets: PlannedSet[] = [...resumedSets.values()].map((records) => ({
      from: (records[0] as MoveRecord).from,
      to: (records[0] as MoveRecord).to,
      records,
      tables: new Map(),
      resumed: true,
    }));
    const checked: {
      pair: { from: string; to: string; shards: number[] };
      tables: Map<number, SourceTable[]>;
    }[] = [];
    const checkStarted = performance.now();
    for (const pair of byPair.values()) {
      const source = await openServer(config, pair.from);
      const target = await openServer(config, pair.to).catch(async (e) => {
        await source.end().catch(() => {});
        throw e;
      });
      let tables: Map<number, SourceTable[]>;
      try {
        tables = await preflightSet(
          config,
          pair.shards.map((shard) => ({
            shard,
            schema: (placements.get(shard) as { schema: string }).schema,
          })),
          pair.from,
          pair.to,
          source,
          target,
        );
      } finally {
        await Promise.all([source.end().catch(() => {}), target.end().catch(() => {})]);
      }
      checked.push({ pair, tables });
    }
    await checkReplicationLimits(
      config,
      [...sets.map((s) => ({ from: s.from, to: s.to })), ...checked.map((c) => c.pair)],
      opts.streamsPerServer,
    );
    for (const { pair, tables } of checked) {
      const records = await inTransaction(catalog, async () => {
        const made = await createBatch(
          catalog,
          pair.shards.map((shard) => ({
            shard,
            schema: (placements.get(shard) as { schema: string }).schema,
            from: pair.from,
            to: pair.to,
          })),
          owner(opts),
        );
        await setShardsState(catalog, pair.shards, 'moving');
        return made;
      });
      sets.push({ from: pair.from, to: pair.to, records, tables, resumed: false });
    }

    const checkMs = round(performance.now() - checkStarted);
    const { results, errors } = await runSideBySide(config, opts, sets);
    for (const r of results) if (r.setSteps) r.setSteps.check = checkMs;
    if (errors.length > 0) {
      const first = errors[0];
      if (errors.length === 1 || first instanceof MoveInterrupted) throw first;
      throw new ShardflakeError(
        'MOVE_FAILED',
        `${errors.length} sets failed: ${errors.map((e) => (e as Error).message).join(' | ')}`,
        { cause: first },
      );
    }
    const byShard = new Map(results.map((r) => [r.shard, r]));
    return shards.map((n) => byShard.get(n)).filter((r): r is MoveResult => r !== undefined);
  } catch (error) {
    throw isShardflakeError(error) ? error : wrapPgError(error);
  } finally {
    for (const shard of locked) await unlockShard(catalog, shard).catch(() => {});
    await catalog.end().catch(() => {});
  }
}

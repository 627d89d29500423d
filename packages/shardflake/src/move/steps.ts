import type pg from 'pg';
import { type ClusterConfig, targetVersion } from '../cluster/config.js';
import { primaryUrl } from '../cluster/connections.js';
import { fenceSql, isFenced, sealOldCopiesSql, unfenceSql } from '../cluster/fence.js';
import { settlePreparedOnShards } from '../cluster/transactions/settle.js';
import { ShardflakeError } from '../errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import { bypassGuardSql, ddlPastGuard, guardSchema, unguardSchema } from './ddl-guard.js';
import { moveGeneratorState } from './generator.js';
import { recordPhase, recordSubscriptionOid } from './record.js';
import {
  createPublication,
  createSubscription,
  currentLsn,
  dropPublication,
  dropSlots,
  dropSubscription,
  grantReplicationRead,
  subscriptionProgress,
} from './replication.js';
import {
  advance,
  checkpoint,
  countRows,
  inTransaction,
  type Session,
  schemaVersion,
  setShardState,
  sleep,
} from './session.js';
import { verifyOnSnapshots } from './snapshots.js';
import { dropSchema, listTables, requirePrimaryKeys, type SourceTable, schemaExists } from './tables.js';
import { buildDeferredIndexes, createTargetSchema } from './target-schema.js';
import { compareDigests, countTables, digestTables, verificationError } from './verify.js';

/**
 * The steps of a shard move (see move.ts for the whole story), one function per phase transition. Each starts by
 * looking at what exists, so a rerun after a crash can run it again.
 */
/** Checks that must pass before a fresh move changes anything. */
export async function preflight(
  config: ClusterConfig,
  shard: number,
  schema: string,
  from: string,
  to: string,
  source: pg.Client,
  target: pg.Client,
): Promise<SourceTable[]> {
  const wal = await source.query('SHOW wal_level');
  if ((wal.rows[0] as { wal_level: string }).wal_level !== 'logical') {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `server ${from} runs with wal_level=${(wal.rows[0] as { wal_level: string }).wal_level}; shard moves need wal_level=logical`,
    );
  }
  // The subscription needs one slot for itself and, while copying, up to max_sync_workers_per_subscription more.
  const slots = await source.query(
    `SELECT current_setting('max_replication_slots')::int AS max, (SELECT count(*)::int FROM pg_replication_slots) AS used,
            current_setting('max_wal_senders')::int AS senders`,
  );
  const { max, used, senders } = slots.rows[0] as { max: number; used: number; senders: number };
  if (max - used < 1 || senders < 1) {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `server ${from} has no free replication slot (max_replication_slots=${max}, ${used} in use, max_wal_senders=${senders}); run shardflake cluster cleanup or raise the limits`,
    );
  }
  if (!(await schemaExists(source, schema))) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `the catalog places shard ${shard} on server ${from}, but schema ${schema} is not there`,
    );
  }
  const tables = await listTables(source, schema);
  requirePrimaryKeys(schema, tables);
  const version = await schemaVersion(source, schema);
  if (version !== targetVersion(config)) {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `shard ${shard} is at schema version ${version ?? 'unknown'} but the cluster's schema is at ${targetVersion(config)}; run cluster migrate before moving it`,
    );
  }
  if (await schemaExists(target, schema)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `server ${to} still holds a copy of shard ${shard} (schema ${schema}) left by an earlier move; run shardflake cluster cleanup first`,
    );
  }
  return tables;
}

// ---------------------------------------------------------------------------------------------------- phases

/** planned → prepared: the empty target copy and the source's publication. */
export async function prepare(s: Session): Promise<void> {
  const { source, target, record } = s;
  if (await schemaExists(target, record.schema)) {
    // Only this move, killed before recording `prepared`, can have made it: preflight refused any copy there, and
    // before the switch the catalog places the shard on the source. It has no subscription yet, so no data.
    await dropSchema(target, record.schema);
  }
  await createTargetSchema(target, s.config, record.shard, record.schema);
  // The copy in the making is fenced too, so no client can write to it before the switch; the subscription's
  // workers run as replication sessions, for which ordinary triggers do not fire, so the copy still fills.
  await target.query(
    fenceSql(
      record.schema,
      s.tables.map((t) => t.name),
      `shard ${record.shard} is being copied to this server by move #${record.id}; it stays on server ${record.from} until the move switches`,
    ),
  );
  const targetTables = await listTables(target, record.schema);
  const differ = s.tables.filter((t) => targetTables.find((u) => u.name === t.name)?.shape !== t.shape);
  if (differ.length > 0 || targetTables.length !== s.tables.length) {
    throw new ShardflakeError(
      'MOVE_FAILED',
      `the tables the config creates differ from shard ${record.shard}'s tables on server ${record.from} (${differ.map((t) => t.name).join(', ') || 'a different set of tables'}); was DDL run outside cluster migrate?`,
    );
  }
  await createPublication(
    source,
    s.names.publication,
    record.schema,
    s.tables.map((t) => t.name),
  );
  await guardSchema(source, record.schema, record.id);
  await advance(s, 'prepared');
}

/** prepared → subscribed: the subscription starts the copy. */
export async function subscribe(s: Session): Promise<void> {
  // The subscription's slot waits for every transaction running on the source, in-doubt prepared ones too.
  await settlePreparedOnShards(s.config, s.record.from, 'all', { failWith: 'MOVE_FAILED' });
  await grantReplicationRead(
    s.source,
    s.opts.replication,
    s.record.schema,
    s.tables.map((t) => t.name),
  );
  const oid = await createSubscription(
    s.target,
    s.names,
    await primaryUrl(s.config, s.record.from),
    s.opts.replication,
  );
  await recordSubscriptionOid(s.catalog, s.record.id, oid);
  s.record = { ...s.record, subscriptionOid: oid };
  await advance(s, 'subscribed');
}

/** subscribed → synced: every table copied, and the target caught up with a recent source LSN. */
export async function waitSynced(s: Session): Promise<void> {
  const started = performance.now();
  const deadline = started + s.opts.syncTimeoutMs;
  const total = await countRows(s.source, s.record.schema, s.tables);
  let lsn: string | undefined;
  let copiedAt = started;
  for (;;) {
    await checkpoint(s, null);
    const p = await subscriptionProgress(s.target, s.names.subscription, lsn);
    if (p.errors > 0) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the subscription on server ${s.record.to} reported ${p.errors} error(s) while copying; see that server's log`,
      );
    }
    if (p.tables > 0 && p.ready === p.tables) {
      if (lsn === undefined) {
        copiedAt = performance.now();
        s.copiedRows = await countRows(s.target, s.record.schema, s.tables);
        await buildDeferredIndexes(s.source, s.target, s.record.schema);
        lsn = await currentLsn(s.source);
      } else if (p.receivedUpTo) break;
    } else {
      s.opts.onProgress?.({
        shard: s.record.shard,
        moveId: s.record.id,
        phase: 'copying',
        copiedRows: p.copying,
        totalRows: total,
      });
    }
    if (performance.now() > deadline) {
      throw new ShardflakeError(
        'MOVE_FAILED',
        `the copy of shard ${s.record.shard} did not finish within ${s.opts.syncTimeoutMs} ms`,
      );
    }
    await sleep(s.opts.pollMs * 5);
  }
  s.copyMs = copiedAt - started;
  s.indexMs = performance.now() - copiedAt;
  s.rows = await countRows(s.target, s.record.schema, s.tables);
  await advance(s, 'synced', { rowsCopied: s.rows });
}

/** Polls `check` until it returns true; throws MOVE_FAILED with `what` after `timeoutMs`. */
async function waitUntil(s: Session, check: () => Promise<boolean>, timeoutMs: number, what: string) {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline)
      throw new ShardflakeError('MOVE_FAILED', `${what} within ${timeoutMs} ms`);
    await sleep(s.opts.pollMs / 4);
  }
}

/**
 * synced → fenced: the write pause. Everything from LOCK to COMMIT is one source transaction, so a crash anywhere
 * in it releases the lock and leaves the source the one writable copy, unfenced.
 */
export async function cutover(s: Session): Promise<number> {
  const { source, target, record } = s;
  if (await isFenced(source, record.schema)) {
    // A previous run committed the fence (which it did only after verifying and moving the generator).
    return performance.now();
  }
  const tableList = s.tables.map((t) => qualified(record.schema, t.name)).join(', ');
  const names = s.tables.map((t) => t.name);
  const bySnapshots = s.opts.verify === 'snapshots';
  // In-doubt prepared transactions hold the tables' locks until settled, by their decision (transactions/settle.ts).
  await settlePreparedOnShards(s.config, record.from, [record.schema], { failWith: 'MOVE_FAILED' });
  if (bySnapshots) {
    const checked = await verifyOnSnapshots({
      sourceUrl: await primaryUrl(s.config, record.from),
      targetUrl: await primaryUrl(s.config, record.to),
      schema: record.schema,
      tables: names,
      lockTimeoutMs: s.opts.lockTimeoutMs,
      timeoutMs: s.opts.cutoverTimeoutMs,
    });
    s.snapshot = { pauseMs: checked.pauseMs, compareMs: checked.compareMs };
  }
  for (let attempt = 1; ; attempt++) {
    const lockAt = performance.now();
    await source.query('BEGIN');
    try {
      await source.query(
        `SET LOCAL lock_timeout = ${Math.max(1, Math.round(s.opts.lockTimeoutMs))}; ${bypassGuardSql()}`,
      );
      await source.query(`LOCK TABLE ${tableList} IN EXCLUSIVE MODE`);
    } catch (error) {
      await source.query('ROLLBACK').catch(() => {});
      const lockTimeout = (error as { code?: string }).code === '55P03';
      if (lockTimeout && attempt < s.opts.cutoverAttempts) continue;
      throw lockTimeout
        ? new ShardflakeError(
            'MOVE_FAILED',
            `could not lock shard ${record.shard}'s tables for cutover: long transactions hold them`,
          )
        : wrapPgError(error);
    }
    const pausedAt = performance.now();
    let mark = pausedAt;
    const step = (name: string) => {
      const now = performance.now();
      s.pauseSteps[name] = Math.round((now - mark) * 10) / 10;
      mark = now;
    };
    s.pauseSteps = { lock: Math.round((pausedAt - lockAt) * 10) / 10 };
    try {
      await checkpoint(s, 'cutover-locked');
      const lsn = await currentLsn(source);
      await waitUntil(
        s,
        async () => (await subscriptionProgress(target, s.names.subscription, lsn)).receivedUpTo,
        s.opts.cutoverTimeoutMs,
        `the target did not catch up with the source's last change`,
      );
      step('catchUp');
      // Compare both copies: the source cannot change now; the target may still be applying the last commit.
      const digest = bySnapshots ? countTables : digestTables;
      const targetDigest = () => inTransaction(target, () => digest(target, record.schema, names));
      const [sourceDigests, firstTarget] = await Promise.all([
        digest(source, record.schema, names),
        targetDigest(),
      ]);
      const deadline = performance.now() + s.opts.cutoverTimeoutMs;
      for (let targetDigests = firstTarget; ; targetDigests = await targetDigest()) {
        const differences = compareDigests(sourceDigests, targetDigests);
        if (differences.length === 0) break;
        if (performance.now() > deadline) throw verificationError(differences);
        await sleep(s.opts.pollMs / 4);
      }
      s.rows = sourceDigests.reduce((n, d) => n + d.rows, 0n);
      step('verify');
      await moveGeneratorState(source, target, record.schema, s.tables);
      await source.query(
        fenceSql(
          record.schema,
          names,
          `shard ${record.shard} has moved from server ${record.from} to server ${record.to} (move #${record.id}); refresh the shard map`,
        ),
      );
      await source.query('COMMIT');
      step('fence');
    } catch (error) {
      await source.query('ROLLBACK').catch(() => {});
      throw error;
    }
    await advance(s, 'fenced');
    step('record');
    return lockAt;
  }
}

function sumSteps(steps: Record<string, number>): number {
  return Object.values(steps).reduce((n, v) => n + v, 0);
}

/** fenced → switched: the catalog names the target; routers learn it by NOTIFY at commit. */
export async function switchCatalog(s: Session, pausedAt: number | null): Promise<void> {
  // Both copies are fenced now; open the target just before the catalog points at it.
  if (await isFenced(s.target, s.record.schema)) await s.target.query(unfenceSql(s.record.schema));
  await inTransaction(s.catalog, async () => {
    s.mapVersion = await setShardState(s.catalog, s.record.shard, 'active', s.record.to);
    if (pausedAt !== null) {
      s.pauseMs = performance.now() - pausedAt;
      s.pauseSteps.switch = Math.round((s.pauseMs - sumSteps(s.pauseSteps)) * 10) / 10;
    }
    await recordPhase(s.catalog, s.record.id, 'switched', s.pauseMs === null ? {} : { pauseMs: s.pauseMs });
  });
  s.record = { ...s.record, phase: 'switched' };
  s.opts.onProgress?.({
    shard: s.record.shard,
    moveId: s.record.id,
    phase: 'switched',
    copiedRows: s.rows,
    totalRows: s.rows,
  });
  await checkpoint(s, 'switched');
}

/** switched → done: no replication object may outlive the move. */
export async function finish(s: Session): Promise<void> {
  // The fence must exist before the subscription goes (a resumed move re-checks it).
  if (!(await isFenced(s.source, s.record.schema))) {
    await ddlPastGuard(
      s.source,
      fenceSql(
        s.record.schema,
        s.tables.map((t) => t.name),
        `shard ${s.record.shard} has moved from server ${s.record.from} to server ${s.record.to} (move #${s.record.id}); refresh the shard map`,
      ),
    );
  }
  await ddlPastGuard(s.source, sealOldCopiesSql([s.record.schema])); // owner, rights, ENABLE ALWAYS: fence.ts
  await dropSubscription(s.target, s.names.subscription, true);
  await dropPublication(s.source, s.names.publication);
  await dropSlots(s.source, s.names.slot, s.record.subscriptionOid);
  await unguardSchema(s.source, s.record.schema);
  await advance(s, 'done');
}

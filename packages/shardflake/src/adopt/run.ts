import type pg from 'pg';
import { initCluster } from '../admin/init.js';
import { migrateCluster } from '../admin/migrate.js';
import {
  type AdoptionRecord,
  adoptPhaseReached,
  readAdoption,
  recordAdoption,
  recordAdoptionError,
  recordTableCopy,
  recordTableEstimates,
  setAdoptionPhase,
  tryLockAdoption,
  unlockAdoption,
} from '../catalog/adopt.js';
import { recordServers, withoutPassword } from '../catalog/servers.js';
import { installCatalog, readClusterInfo, setShardsState } from '../catalog/shards.js';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import type { ClusterConfig } from '../config/config.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { isShardflakeError, ShardflakeError } from '../errors/errors.js';
import { isFenced } from '../fence/fence.js';
import { entryTable } from '../lookups/ddl.js';
import { createSlotWithSnapshot } from '../move/snapshot-copy.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { qualified } from '../postgres/identifier.js';
import { connectServer } from '../topology/connections.js';
import { appliedSql, setApplied, settlePrepared } from './apply.js';
import { oldIdsBoundary } from './boundary.js';
import { copyTables } from './copy.js';
import { type CutoverResult, cutoverAdoption } from './cutover.js';
import { deferIndexes, rebuildIndexes } from './indexes.js';
import { type AdoptModel, buildModel } from './model.js';
import { createPublication, dropPublication, dropSlot, slotState } from './slot.js';
import { readSourceSchema } from './source-schema.js';
import { Stream } from './stream.js';
import { Targets } from './targets.js';

/**
 * `cluster adopt run`: the phases of catalog/adopt.ts, each starting by looking at what exists, so that a rerun
 * after a kill at any moment resumes:
 *
 * - start: the source checked (wal_level, the ids' boundary), the adoption recorded (phase `copying`, so routers
 *   serve every shard from the source from the first map on), the cluster created (`initCluster`, idempotent) with
 *   its shards `moving` (migrations and moves leave them alone until the switch).
 * - copying: a killed copy's slot dropped and its partial copy emptied; the publication; a new slot with its
 *   exported snapshot; every table copied at that snapshot (copy.ts); each server's applied LSN set to the slot's
 *   consistent point; phase `streaming`. (A copy restarts whole: its snapshot died with the run that took it.)
 * - streaming: prepared batches of a killed run settled (apply.ts), then the slot's transactions applied and
 *   confirmed until the run is stopped, or until a cutover is asked for (`--cutover`, or `adopt cutover` from
 *   another shell, which sets a flag in the catalog) and the stream has caught up.
 * - cutover (cutover.ts): verified, fenced, switched; then the slot and the publication are dropped (`done`).
 */
export interface AdoptRunOptions {
  /** Cut over as soon as the stream has caught up (else: stream until stopped or asked to cut over). */
  cutover?: boolean;
  /** Tables copied at once (default 2). */
  copyWorkers?: number;
  /** About how many changes one applied batch holds (default 5000). */
  batchChanges?: number;
  /** How often an idle stream looks for new changes, in ms (default 200). */
  pollMs?: number;
  /** Stops the stream (the adoption stays `streaming`; a rerun continues). */
  signal?: AbortSignal;
  onProgress?: (p: AdoptProgress) => void;
  /** Test hook: called after each step (`created`, `copied`, `applied`, `verified`, `fenced`, `switched`). */
  afterStep?: (step: string) => Promise<void>;
}

export interface AdoptProgress {
  phase: 'init' | 'copying' | 'streaming' | 'cutover';
  /** init: shards; copying: rows; streaming: changes applied. */
  done: number;
  total: number;
  table?: string;
  behindBytes?: bigint;
}

export interface AdoptRunResult {
  phase: AdoptionRecord['phase'];
  /** Rows copied per table by this run (empty when an earlier run copied). */
  copied: Record<string, number>;
  /** The copy, from the slot to the last row written and the secondary indexes built. */
  copyMs: number | null;
  /** Of which the secondary indexes built after the rows. */
  indexMs: number | null;
  changesApplied: number;
  cutover: CutoverResult | null;
  oldIdsBelow: bigint;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function adoptionNames(config: ClusterConfig): { slot: string; publication: string } {
  // One adoption per cluster: the names come from the catalog server's name, so a rerun finds them again.
  const base = `sf_adopt_${config.catalog.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`.slice(0, 50);
  return { slot: base, publication: base };
}

async function checkSource(source: pg.ClientBase): Promise<void> {
  const { rows } = await source.query(
    `SELECT current_setting('wal_level') AS wal_level,
            (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user) AS may_replicate`,
  );
  const r = rows[0] as { wal_level: string; may_replicate: boolean };
  const problems: string[] = [];
  if (r.wal_level !== 'logical')
    problems.push(
      `wal_level is ${r.wal_level}, not logical (set wal_level = logical and restart the source)`,
    );
  if (!r.may_replicate)
    problems.push('the role has neither REPLICATION nor SUPERUSER (ALTER ROLE … REPLICATION)');
  if (problems.length > 0)
    throw new ShardflakeError('ADOPT_REFUSED', `the source cannot be adopted yet: ${problems.join('; ')}`);
}

/** Every adopted table's copy in every shard (and entries, and reference copies) emptied, one statement per server. */
async function emptyTargets(model: AdoptModel, targets: Targets, clients: ReadonlyMap<string, pg.Client>) {
  for (const [server, client] of clients) {
    const names: string[] = [];
    for (const p of targets.shardsOn(server)) {
      for (const t of model.tables.values()) {
        if (t.kind !== 'sharded') continue;
        names.push(qualified(p.schema, t.name));
        for (const l of t.lookups) names.push(qualified(p.schema, entryTable(l.name)));
      }
      names.push(qualified(p.schema, OLD_IDS_TABLE));
    }
    for (const t of model.tables.values())
      if (t.kind === 'reference') names.push(qualified(REFERENCE_SCHEMA, t.name));
    for (let i = 0; i < names.length; i += 4000)
      await client.query(`TRUNCATE ${names.slice(i, i + 4000).join(', ')}`);
  }
}

export async function runAdoption(
  config: ClusterConfig,
  options: AdoptRunOptions = {},
): Promise<AdoptRunResult> {
  const adopt = config.adopt;
  if (!adopt)
    throw new ShardflakeError(
      'INVALID_CONFIG',
      `${config.source}: has no adopt section; make one with cluster adopt plan`,
    );
  const names = adoptionNames(config);
  const catalog = await connectServer(config, config.catalog, { applicationName: 'shardflake adopt' });
  const opened: pg.Client[] = [catalog];
  let targets: Targets | undefined;
  let locked = false;
  try {
    await installCatalog(catalog);
    if (!(await tryLockAdoption(catalog)))
      throw new ShardflakeError(
        'ADOPT_FAILED',
        'another shardflake cluster adopt run is running for this cluster (it holds the adoption); use adopt status, or adopt cutover to ask it to cut over',
      );
    locked = true;
    const source = await connect(adopt.from, { applicationName: 'shardflake adopt' });
    opened.push(source);
    const model = buildModel(config, await readSourceSchema(source, adopt.schema));
    let record = await readAdoption(catalog);
    const result: AdoptRunResult = {
      phase: record?.phase ?? 'copying',
      copied: {},
      copyMs: null,
      indexMs: null,
      changesApplied: 0,
      cutover: null,
      oldIdsBelow: record?.oldIdsBelow ?? 0n,
    };
    if (record && adoptPhaseReached(record.phase, 'switched')) {
      if (record.phase === 'switched') {
        await dropSlot(source, names.slot);
        await dropPublication(source, names.publication);
        await setAdoptionPhase(catalog, 'done');
      }
      return { ...result, phase: 'done' };
    }
    if (!record || record.phase === 'aborted') {
      await checkSource(source);
      const createdCluster = (await readClusterInfo(catalog)) === null;
      const oldIdsBelow = await oldIdsBoundary(config, model, source);
      await recordAdoption(
        catalog,
        {
          sourceServer: adopt.server,
          sourceUrl: withoutPassword(adopt.from),
          sourceSchema: adopt.schema,
          root: adopt.root,
          tables: model.order.filter((n) => model.tables.get(n)?.kind === 'sharded'),
          slot: names.slot,
          publication: names.publication,
          oldIdsBelow,
          createdCluster,
        },
        model.order.map((name) => ({ name, kind: model.tables.get(name)?.kind ?? 'sharded' })),
      );
      record = (await readAdoption(catalog)) as AdoptionRecord;
    }
    result.oldIdsBelow = record.oldIdsBelow;
    // Killed between the fence's commit and recording it: the source says so itself.
    if (record.phase === 'streaming' && (await isFenced(source, adopt.schema))) {
      await setAdoptionPhase(catalog, 'fenced');
      record.phase = 'fenced';
    }
    if (record.root !== adopt.root || record.sourceSchema !== adopt.schema)
      throw new ShardflakeError(
        'INVALID_CONFIG',
        `${config.source}: the adoption recorded in the catalog takes ${record.sourceSchema}.${record.root} as its root; the config says ${adopt.schema}.${adopt.root}`,
      );
    // Routers on a config without the source learn its address (no password) from the catalog, as for new servers.
    await recordServers(catalog, { [adopt.server]: [adopt.from] });
    if (record.phase === 'copying') {
      // The shards' id rule lets the source's ids in wherever their rows go (postgres/id-shard-rule.ts): the bound
      // is recorded with the cluster before any shard is made, and shards that were there before get the new rule.
      await initCluster(
        { ...config, oldIdsBelow: record.oldIdsBelow },
        { onProgress: (done, total) => options.onProgress?.({ phase: 'init', done, total }) },
      );
      if (!record.createdCluster) await migrateCluster(config);
      await catalog.query('BEGIN');
      await setShardsState(
        catalog,
        Array.from({ length: config.logicalShards }, (_, i) => i),
        'moving',
      );
      await catalog.query('COMMIT');
      await options.afterStep?.('created');
    }
    targets = await Targets.open(config, catalog);
    const clients = new Map<string, pg.Client>();
    for (const server of targets.servers) {
      const client = await targets.connect(server, 'shardflake adopt apply');
      await client.query(appliedSql());
      clients.set(server, client);
    }
    if (clients.size > 1) {
      // Each applied batch commits on every server or none: PREPARE TRANSACTION.
      const without: string[] = [];
      for (const [server, client] of clients) {
        const { rows } = await client.query("SELECT current_setting('max_prepared_transactions')::int AS n");
        if ((rows[0] as { n: number }).n === 0) without.push(server);
      }
      if (without.length > 0)
        throw new ShardflakeError(
          'ADOPT_REFUSED',
          `server ${without.join(', ')} has max_prepared_transactions = 0: the stream commits each batch on every server or none; set it above 0 (a restart)`,
        );
    }

    if (record.phase === 'copying') {
      // A killed copy left its slot (made before the first row): its rows are emptied before the slot goes, so a
      // kill between the two finds the slot again. Without a slot nothing was copied, and the (many) shard tables
      // are not truncated for nothing.
      if ((await slotState(source, names.slot)).exists) {
        await emptyTargets(model, targets, clients);
        await dropSlot(source, names.slot);
      }
      await createPublication(source, names.publication, adopt.schema, model.order);
      for (const [server, client] of clients)
        await deferIndexes(
          client,
          targets.shardsOn(server).map((p) => p.schema),
        );
      await recordTableEstimates(
        catalog,
        new Map(model.order.map((n) => [n, model.tables.get(n)?.estimate ?? 0n])),
      );
      const started = performance.now();
      const slot = await createSlotWithSnapshot(adopt.from, names.slot, 'shardflake adopt slot');
      opened.push(slot.connection);
      const copied = await copyTables(model, targets, {
        snapshot: slot.snapshot,
        workers: options.copyWorkers ?? 2,
        onProgress: (p) =>
          options.onProgress?.({ phase: 'copying', done: p.done, total: p.total, table: p.table }),
        onTableDone: async (table, rows) => {
          await recordTableCopy(catalog, table, BigInt(rows), true);
          await options.afterStep?.(`table:${table}`);
        },
      });
      await slot.connection.end().catch(() => {});
      const indexesAt = performance.now();
      await Promise.all([...clients.values()].map((client) => rebuildIndexes(client)));
      result.indexMs = performance.now() - indexesAt;
      result.copyMs = performance.now() - started;
      result.copied = Object.fromEntries(copied);
      for (const client of clients.values()) await setApplied(client, slot.consistentPoint);
      await setAdoptionPhase(catalog, 'streaming', { error: null });
      record.phase = 'streaming';
      await options.afterStep?.('copied');
    }

    const at = await settlePrepared(clients, names.slot);
    if (at === null)
      throw new ShardflakeError(
        'ADOPT_FAILED',
        'the target servers have no applied position; run adopt abort and start again',
      );
    let lastProgress = 0;
    const stream = new Stream(
      model,
      targets,
      source,
      catalog,
      clients,
      names,
      at,
      options.batchChanges ?? 5000,
      (p) => {
        result.changesApplied = p.changes;
        if (performance.now() - lastProgress < 200) return;
        lastProgress = performance.now();
        options.onProgress?.({
          phase: 'streaming',
          done: p.changes,
          total: p.changes,
          behindBytes: p.behindBytes,
        });
      },
    );
    const cutoverContext = {
      stream,
      catalog,
      sourceUrl: adopt.from,
      tables: model.order,
      schema: adopt.schema,
      pauseBoundMs: adopt.pauseBoundMs,
      logicalShards: config.logicalShards,
      catalogServer: config.catalog,
      afterStep: options.afterStep,
    };
    if (record.phase === 'fenced') {
      result.cutover = await cutoverAdoption(cutoverContext, true);
    } else {
      let askedAt = 0;
      let asked = false;
      let appliedOnce = false;
      for (;;) {
        if (options.signal?.aborted) return { ...result, phase: 'streaming' };
        const { read, atEnd } = await stream.step();
        if (read > 0 && !appliedOnce) {
          appliedOnce = true;
          await options.afterStep?.('applied');
        }
        if (performance.now() - askedAt > 500) {
          askedAt = performance.now();
          asked = (await readAdoption(catalog))?.cutoverRequested === true;
        }
        if (atEnd && (options.cutover || asked)) break;
        if (read === 0) await sleep(options.pollMs ?? 200);
      }
      result.cutover = await cutoverAdoption(cutoverContext, false);
    }
    await dropSlot(source, names.slot);
    await dropPublication(source, names.publication);
    await setAdoptionPhase(catalog, 'done');
    return { ...result, phase: 'done' };
  } catch (error) {
    const e = isShardflakeError(error) ? error : wrapPgError(error);
    // What stopped the run stays visible to adopt status until a run gets further.
    await recordAdoptionError(catalog, e.message).catch(() => {});
    throw e;
  } finally {
    if (locked) await unlockAdoption(catalog).catch(() => {});
    await targets?.close();
    await Promise.all(opened.map((c) => c.end().catch(() => {})));
  }
}

import type pg from 'pg';
import {
  adoptPhaseReached,
  markAdoptionAborted,
  readAdoption,
  tryLockAdoption,
  unlockAdoption,
} from '../catalog/adopt.js';
import { readShardMap, recordOldIdsBelow, setShardsState } from '../catalog/shards.js';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import type { ClusterConfig } from '../config/config.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { connect, wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import { dropSlowPathIfUnusedSql } from '../postgres/slow-path-sql.js';
import { closeAll, connectAll } from '../topology/connections.js';
import { APPLIED_SCHEMA } from './apply.js';
import { adoptionNames } from './run.js';
import { dropPublication, dropSlot } from './slot.js';

/**
 * `cluster adopt abort`, before the cutover: removes what the adoption made. On the source: the slot (its WAL is
 * released), the publication, and nothing else exists there to remove (the adoption adds no trigger, function or
 * schema to the source before its fence). On the servers: batches a killed run left prepared, the applied-position
 * schema, and — when the adoption created the cluster — the whole cluster (every shard schema, the reference and
 * transaction bookkeeping, the catalog); otherwise the adopted tables' rows, and the shards are active again.
 * After the cutover it refuses: the shards are the one writable copy, and the way back is in docs/adopt.md.
 */
export interface AbortResult {
  removedCluster: boolean;
  droppedSlot: boolean;
}

export async function abortAdoption(config: ClusterConfig): Promise<AbortResult> {
  const names = adoptionNames(config);
  const clients = await connectAll(config, { applicationName: 'shardflake adopt abort' });
  const catalog = clients.get(config.catalog) as pg.Client;
  let locked = false;
  try {
    const record = await readAdoption(catalog);
    if (record && adoptPhaseReached(record.phase, 'fenced') && record.phase !== 'aborted')
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        record.phase === 'fenced'
          ? 'the adoption has fenced the source and only waits for its switch: run shardflake cluster adopt run to finish it (docs/adopt.md, "Going back")'
          : 'the adoption has cut over: the shards are the one writable copy now and abort would lose their writes; the source stays intact and fenced — see docs/adopt.md, "Going back"',
      );
    if (!(await tryLockAdoption(catalog)))
      throw new ShardflakeError(
        'ADOPT_FAILED',
        'a shardflake cluster adopt run is running for this cluster; stop it first (Ctrl-C), then abort',
      );
    locked = true;
    let droppedSlot = false;
    if (config.adopt) {
      const source = await connect(config.adopt.from, { applicationName: 'shardflake adopt abort' });
      try {
        const { rows } = await source.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [
          names.slot,
        ]);
        droppedSlot = rows.length > 0;
        await dropSlot(source, names.slot);
        await dropPublication(source, names.publication);
      } finally {
        await source.end().catch(() => {});
      }
    }
    const removeCluster = record?.createdCluster === true;
    for (const [, client] of clients) {
      const { rows } = await client.query('SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1', [
        `${names.slot}:%`,
      ]);
      for (const { gid } of rows as { gid: string }[])
        await client.query(`ROLLBACK PREPARED ${quoteLiteral(gid)}`);
      await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(APPLIED_SCHEMA)} CASCADE`);
    }
    if (record && removeCluster) {
      for (const [, client] of clients) {
        const { rows } = await client.query(
          `SELECT nspname::text AS s FROM pg_namespace WHERE nspname ~ ('^' || $1 || '[0-9]{4}$')`,
          [config.schemaPrefix],
        );
        const schemas = [...(rows as { s: string }[]).map((r) => r.s), REFERENCE_SCHEMA];
        // The catalog, and on every server the cross-server transactions' bookkeeping (recovery/install.ts).
        schemas.push('shardflake');
        for (let i = 0; i < schemas.length; i += 200)
          await client.query(
            `SET client_min_messages = warning; DROP SCHEMA IF EXISTS ${schemas
              .slice(i, i + 200)
              .map((s) => quoteIdent(s))
              .join(', ')} CASCADE`,
          );
        // The generator's shared slow path (postgres/slow-path-sql.ts), unless something else still calls it.
        await client.query(`SET client_min_messages = warning; ${dropSlowPathIfUnusedSql()}`);
      }
      locked = false;
    } else if (record) {
      // The cluster was there before: the adopted tables' rows go, the shards stay, and so does no old-id bound
      // (the shards' id rules keep the exemption until the next cluster migrate; no old id is left to use it).
      await recordOldIdsBelow(catalog, null);
      const map = await readShardMap(catalog);
      const tables = [...Object.keys(config.adopt?.place ?? {})];
      for (const [server, client] of clients) {
        const names = map.shards
          .filter((p) => p.server === server)
          .flatMap((p) => [...tables.map((t) => qualified(p.schema, t)), qualified(p.schema, OLD_IDS_TABLE)]);
        for (const t of config.adopt?.reference ?? []) names.push(qualified(REFERENCE_SCHEMA, t));
        for (let i = 0; i < names.length; i += 4000)
          await client.query(`TRUNCATE ${names.slice(i, i + 4000).join(', ')}`);
      }
      await catalog.query('BEGIN');
      await setShardsState(
        catalog,
        Array.from({ length: config.logicalShards }, (_, i) => i),
        'active',
      );
      await markAdoptionAborted(catalog);
      await catalog.query('COMMIT');
    }
    return { removedCluster: removeCluster, droppedSlot };
  } catch (error) {
    throw error instanceof ShardflakeError ? error : wrapPgError(error);
  } finally {
    if (locked) await unlockAdoption(catalog).catch(() => {});
    await closeAll(clients);
  }
}

import type pg from 'pg';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { ShardflakeError } from '../errors/errors.js';
import { entryTable } from '../lookups/ddl.js';
import { BatchFailure, type BatchStatement, queryBatch } from '../postgres/batch.js';
import { wrapPgError } from '../postgres/connect.js';
import { qualified, quoteIdent, quoteLiteral } from '../postgres/identifier.js';
import { DIGEST_ALL } from '../reference/sql.js';
import { shardForKey } from '../routing/shard-key.js';
import { type AdoptModel, shardOfOldRootId, type TableModel } from './model.js';
import { formatLsn, type Relation, type TupleValue } from './pgoutput.js';
import type { PeekedTransaction } from './slot.js';
import type { Targets } from './targets.js';

/**
 * Applying the source's commits to the shards, a batch of whole source transactions at a time.
 *
 * Exactly once. Every target server applies a batch in one transaction that also sets its
 * `shardflake_adopt.applied` row to the batch's last commit LSN. With several servers the batch commits on all of
 * them or none: each PREPAREs (gid `<slot>:<lsn>:<server>`), then each COMMIT PREPAREs. A run killed in between
 * leaves prepared transactions that the next run settles (`settlePrepared`): a batch prepared on every server that
 * has not committed it is committed (no server could have refused it any more), any other is rolled back. So every
 * server is always at the same LSN, the slot is advanced to it only after that, and the next batch starts exactly
 * there: nothing is applied twice or lost.
 *
 * Where a change goes. A row's shard is its root id's shard (id mod logicalShards) for the root and its children,
 * and for a deeper table its parent's shard, found by the parent's old-id entry (or in this batch, if the parent
 * came in it). An update or delete finds its row's shard the same way from its key. Deletes and updates carry only
 * the key (replica identity), so what a lookup needs to drop — the old value — is read from the shard's row, in the
 * same transaction, before it changes. An update whose unchanged TOASTed columns pgoutput did not send leaves them
 * as they are; a row whose placement column changes moves to its new shard (rows placed beside it cannot follow,
 * so that stops the run, ADOPT_FAILED). TRUNCATE empties the table's copy in every shard.
 */
class ServerWriter {
  private pending: BatchStatement[] = [];
  constructor(
    readonly server: string,
    readonly client: pg.Client,
  ) {}
  push(text: string, values: readonly unknown[] = []): void {
    this.pending.push({ text, values });
  }
  async flush(): Promise<void> {
    if (this.pending.length === 0) return;
    const statements = this.pending;
    this.pending = [];
    try {
      await queryBatch(this.client, statements);
    } catch (error) {
      throw error instanceof BatchFailure ? error.cause : error;
    }
  }
  async read(text: string, values: readonly unknown[]): Promise<Record<string, unknown>[]> {
    await this.flush();
    return (await this.client.query(text, values as unknown[])).rows;
  }
}

export const APPLIED_SCHEMA = 'shardflake_adopt';

/** The checkpoint of each target server: the last source LSN it applied (in the transaction that applied it). */
export function appliedSql(): string {
  return `CREATE SCHEMA IF NOT EXISTS ${APPLIED_SCHEMA};
CREATE TABLE IF NOT EXISTS ${APPLIED_SCHEMA}.applied (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), lsn pg_lsn NOT NULL)`;
}

export async function setApplied(client: pg.ClientBase, lsn: string): Promise<void> {
  await client.query(
    `INSERT INTO ${APPLIED_SCHEMA}.applied (lsn) VALUES ($1::pg_lsn) ON CONFLICT (singleton) DO UPDATE SET lsn = excluded.lsn`,
    [lsn],
  );
}

export async function readApplied(client: pg.ClientBase): Promise<string | null> {
  const { rows } = await client.query(`SELECT to_regclass('${APPLIED_SCHEMA}.applied') IS NOT NULL AS ok`);
  if (!(rows[0] as { ok: boolean }).ok) return null;
  const r = await client.query(`SELECT lsn::text AS lsn FROM ${APPLIED_SCHEMA}.applied`);
  return (r.rows[0] as { lsn: string } | undefined)?.lsn ?? null;
}

const gidOf = (slot: string, lsn: string, server: string) => `${slot}:${lsn}:${server}`;

/**
 * Settles batches a killed run left prepared (see the top of the file): commits a batch every server prepared or
 * committed, rolls back any other. Returns the LSN every server is at afterwards.
 */
export async function settlePrepared(
  writers: ReadonlyMap<string, pg.Client>,
  slot: string,
): Promise<string | null> {
  const prepared = new Map<string, Set<string>>();
  const applied = new Map<string, string | null>();
  for (const [server, client] of writers) {
    applied.set(server, await readApplied(client));
    const { rows } = await client.query('SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1', [`${slot}:%`]);
    for (const { gid } of rows as { gid: string }[]) {
      const [, lsn, owner] = gid.split(':');
      if (owner !== server || lsn === undefined) continue;
      const set = prepared.get(lsn) ?? new Set();
      set.add(server);
      prepared.set(lsn, set);
    }
  }
  for (const [lsn, servers] of prepared) {
    const everyone = [...writers.keys()].every((s) => servers.has(s) || applied.get(s) === lsn);
    for (const server of servers) {
      const client = writers.get(server) as pg.Client;
      await client.query(
        `${everyone ? 'COMMIT' : 'ROLLBACK'} PREPARED ${quoteLiteral(gidOf(slot, lsn, server))}`,
      );
    }
  }
  const at = new Set<string | null>();
  for (const [, client] of writers) at.add(await readApplied(client));
  if (at.size !== 1)
    throw new ShardflakeError(
      'ADOPT_FAILED',
      `the target servers applied the source up to different points (${[...at].join(', ')}); run shardflake cluster adopt abort and start again`,
    );
  return [...at][0] ?? null;
}

export class Applier {
  private readonly relations = new Map<number, Relation>();
  private readonly byName: Map<string, TableModel>;
  private writers = new Map<string, ServerWriter>();
  /** Shards of rows placed in this batch, by `table:id` (their entries are not readable until flushed). */
  private placed = new Map<string, number>();
  changes = 0;

  constructor(
    private readonly model: AdoptModel,
    private readonly targets: Targets,
    private readonly clients: ReadonlyMap<string, pg.Client>,
    private readonly slot: string,
  ) {
    this.byName = model.tables;
  }

  /** Learns the relations a transaction describes without applying it (one an earlier run already applied). */
  learn(transaction: PeekedTransaction): void {
    for (const m of transaction.messages)
      if (m.tag === 'relation') this.relations.set(m.relation.oid, m.relation);
  }

  /** Applies whole transactions as one batch on every server; returns the LSN every server is at now. */
  async apply(transactions: readonly PeekedTransaction[]): Promise<string> {
    const last = transactions[transactions.length - 1];
    if (!last) throw new Error('apply: no transactions');
    const lsn = formatLsn(last.endLsn);
    this.writers = new Map([...this.clients].map(([s, c]) => [s, new ServerWriter(s, c)]));
    this.placed = new Map();
    for (const w of this.writers.values()) w.push('BEGIN');
    try {
      for (const t of transactions) {
        for (const m of t.messages) {
          if (m.tag === 'relation') this.relations.set(m.relation.oid, m.relation);
          else if (m.tag === 'insert') await this.insert(this.tableOf(m.oid), this.rowOf(m.oid, m.row));
          else if (m.tag === 'update')
            await this.update(
              this.tableOf(m.oid),
              m.oldKey ? this.rowOf(m.oid, m.oldKey) : null,
              this.rowOf(m.oid, m.row),
            );
          else if (m.tag === 'delete') await this.delete(this.tableOf(m.oid), this.rowOf(m.oid, m.oldKey));
          else if (m.tag === 'truncate') await this.truncate(m.oids.map((oid) => this.tableOf(oid)));
          if (m.tag !== 'relation' && m.tag !== 'other') this.changes++;
        }
      }
      const servers = [...this.writers.values()];
      // Rows applied to a reference table skipped its digest triggers (replica mode): recompute them in the batch,
      // so withReference and cluster verify find digests that match the rows (reference/sql.ts).
      const touchedReference = transactions.some((t) =>
        t.messages.some((m) =>
          m.tag === 'truncate'
            ? m.oids.some((oid) => this.isReference(oid))
            : 'oid' in m && this.isReference(m.oid),
        ),
      );
      if (touchedReference) for (const w of servers) w.push(`SELECT ${DIGEST_ALL}`);
      for (const w of servers)
        w.push(
          `INSERT INTO ${APPLIED_SCHEMA}.applied (lsn) VALUES ($1::pg_lsn) ON CONFLICT (singleton) DO UPDATE SET lsn = excluded.lsn`,
          [lsn],
        );
      if (servers.length === 1) {
        (servers[0] as ServerWriter).push('COMMIT');
        await (servers[0] as ServerWriter).flush();
        return lsn;
      }
      await Promise.all(
        servers.map((w) => {
          w.push(`PREPARE TRANSACTION ${quoteLiteral(gidOf(this.slot, lsn, w.server))}`);
          return w.flush();
        }),
      );
    } catch (error) {
      await Promise.all([...this.writers.values()].map((w) => w.client.query('ROLLBACK').catch(() => {})));
      // A PREPARE that went through on some servers is settled by the next run (settlePrepared).
      throw error instanceof ShardflakeError ? error : wrapPgError(error);
    }
    for (const w of this.writers.values())
      await w.client.query(`COMMIT PREPARED ${quoteLiteral(gidOf(this.slot, lsn, w.server))}`);
    return lsn;
  }

  private isReference(oid: number): boolean {
    const rel = this.relations.get(oid);
    return rel !== undefined && this.byName.get(rel.name)?.kind === 'reference';
  }

  private tableOf(oid: number): TableModel {
    const rel = this.relations.get(oid);
    const t = rel ? this.byName.get(rel.name) : undefined;
    if (!rel || !t)
      throw new ShardflakeError(
        'ADOPT_FAILED',
        `a change of relation ${rel?.name ?? oid} that the adoption does not know`,
      );
    return t;
  }

  private rowOf(oid: number, tuple: TupleValue[]): Map<string, TupleValue> {
    const rel = this.relations.get(oid) as Relation;
    return new Map(rel.columns.map((c, i) => [c.name, tuple[i]]));
  }

  private writer(server: string): ServerWriter {
    return this.writers.get(server) as ServerWriter;
  }

  /** The shard of row `id` of `table`: the root's by its id, any other's by its old-id entry. */
  private async shardOfId(table: string, id: string): Promise<number> {
    const n = this.model.logicalShards;
    if (table === this.model.root) return shardOfOldRootId(BigInt(id), n);
    const known = this.placed.get(`${table}:${id}`);
    if (known !== undefined) return known;
    const at = this.targets.placement(shardOfOldRootId(BigInt(id), n));
    const rows = await this.writer(at.server).read(
      `SELECT shard FROM ${qualified(at.schema, OLD_IDS_TABLE)} WHERE tbl = $1 AND id = $2`,
      [table, id],
    );
    const shard = (rows[0] as { shard: number } | undefined)?.shard;
    if (shard === undefined)
      throw new ShardflakeError(
        'ADOPT_FAILED',
        `row ${id} of table ${table} is not on any shard, yet the source changed a row placed through it`,
      );
    return shard;
  }

  /** Where a row with these values goes: beside its parent (the root's own id for the root). */
  private async shardOfRow(t: TableModel, row: ReadonlyMap<string, TupleValue>): Promise<number> {
    const value = row.get(t.column as string);
    if (typeof value !== 'string')
      throw new ShardflakeError(
        'ADOPT_FAILED',
        `a row of ${t.name} without its placement column ${t.column}`,
      );
    if (t.parent === undefined || t.parent === this.model.root)
      return shardOfOldRootId(BigInt(value), this.model.logicalShards);
    return this.shardOfId(t.parent, value);
  }

  /** The shard that holds the row of this key now. */
  private async currentShard(t: TableModel, key: ReadonlyMap<string, TupleValue>): Promise<number> {
    if (t.name === this.model.root || t.key.includes(t.column as string)) return this.shardOfRow(t, key);
    return this.shardOfId(t.name, key.get(t.entryId as string) as string);
  }

  private keyWhere(t: TableModel, first: number): string {
    return t.key.map((c, i) => `${quoteIdent(c)} = $${first + i}`).join(' AND ');
  }

  private keyValues(t: TableModel, row: ReadonlyMap<string, TupleValue>): TupleValue[] {
    return t.key.map((c) => row.get(c));
  }

  private upsertSql(schema: string, t: TableModel, columns: readonly string[]): string {
    const list = columns.map((c) => quoteIdent(c)).join(', ');
    const rest = columns.filter((c) => !t.key.includes(c));
    const onConflict =
      rest.length === 0
        ? 'DO NOTHING'
        : `DO UPDATE SET ${rest.map((c) => `${quoteIdent(c)} = excluded.${quoteIdent(c)}`).join(', ')}`;
    return `INSERT INTO ${qualified(schema, t.name)} (${list}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(', ')}) ON CONFLICT (${t.key.map((c) => quoteIdent(c)).join(', ')}) ${onConflict}`;
  }

  private entry(lookup: string, unique: boolean, value: string, id: string, add: boolean): void {
    const at = this.targets.placement(shardForKey(value, this.model.logicalShards));
    const table = qualified(at.schema, entryTable(lookup));
    if (add)
      this.writer(at.server).push(
        `INSERT INTO ${table} (value, id) VALUES ($1, $2) ON CONFLICT (${unique ? 'value' : 'value, id'}) DO ${unique ? 'UPDATE SET id = excluded.id' : 'NOTHING'}`,
        [value, id],
      );
    else this.writer(at.server).push(`DELETE FROM ${table} WHERE value = $1 AND id = $2`, [value, id]);
  }

  private oldIdEntry(t: TableModel, id: string, shard: number | null): void {
    const at = this.targets.placement(shardOfOldRootId(BigInt(id), this.model.logicalShards));
    const table = qualified(at.schema, OLD_IDS_TABLE);
    if (shard === null) {
      this.writer(at.server).push(`DELETE FROM ${table} WHERE tbl = $1 AND id = $2`, [t.name, id]);
      this.placed.delete(`${t.name}:${id}`);
    } else {
      this.writer(at.server).push(
        `INSERT INTO ${table} (tbl, id, shard) VALUES ($1, $2, $3) ON CONFLICT (tbl, id) DO UPDATE SET shard = excluded.shard`,
        [t.name, id, shard],
      );
      this.placed.set(`${t.name}:${id}`, shard);
    }
  }

  private lookupChanges(
    t: TableModel,
    before: ReadonlyMap<string, TupleValue> | null,
    after: ReadonlyMap<string, TupleValue> | null,
  ): void {
    const idOf = (row: ReadonlyMap<string, TupleValue>) => row.get('id') as string;
    for (const l of t.lookups) {
      const old = before?.get(l.column);
      let now = after?.get(l.column);
      if (after && now === undefined) now = old;
      const oldId = before ? idOf(before) : undefined;
      const newId = after ? idOf(after) : undefined;
      if (old === now && oldId === newId) continue;
      if (before && typeof old === 'string') this.entry(l.name, l.unique, old, oldId as string, false);
      if (after && typeof now === 'string') this.entry(l.name, l.unique, now, newId as string, true);
    }
  }

  private async insert(t: TableModel, row: Map<string, TupleValue>): Promise<void> {
    if (t.kind === 'reference') {
      for (const server of this.targets.servers)
        this.writer(server).push(
          this.upsertSql(REFERENCE_SCHEMA, t, t.columns),
          t.columns.map((c) => row.get(c)),
        );
      return;
    }
    const shard = await this.shardOfRow(t, row);
    const at = this.targets.placement(shard);
    this.writer(at.server).push(
      this.upsertSql(at.schema, t, t.columns),
      t.columns.map((c) => row.get(c)),
    );
    if (t.entryId !== undefined) this.oldIdEntry(t, row.get(t.entryId) as string, shard);
    this.lookupChanges(t, null, row);
  }

  /** The row's lookup columns as text, read before it changes (what its entries hold). */
  private async readLookupValues(
    server: string,
    schema: string,
    t: TableModel,
    key: ReadonlyMap<string, TupleValue>,
    verb: 'SELECT' | 'DELETE',
  ): Promise<Map<string, TupleValue> | null> {
    const cols = ['id', ...t.lookups.map((l) => l.column)];
    const list = cols.map((c) => `${quoteIdent(c)}::text AS ${quoteIdent(c)}`).join(', ');
    const sql =
      verb === 'SELECT'
        ? `SELECT ${list} FROM ${qualified(schema, t.name)} WHERE ${this.keyWhere(t, 1)} FOR UPDATE`
        : `DELETE FROM ${qualified(schema, t.name)} WHERE ${this.keyWhere(t, 1)} RETURNING ${list}`;
    const rows = await this.writer(server).read(sql, this.keyValues(t, key));
    const r = rows[0];
    return r ? new Map(cols.map((c) => [c, r[c] as string | null])) : null;
  }

  private async update(
    t: TableModel,
    oldKey: Map<string, TupleValue> | null,
    row: Map<string, TupleValue>,
  ): Promise<void> {
    const key = oldKey ?? row;
    const sent = t.columns.filter((c) => row.get(c) !== undefined);
    if (t.kind === 'reference') {
      const set = sent.map((c, i) => `${quoteIdent(c)} = $${i + 1}`).join(', ');
      for (const server of this.targets.servers)
        this.writer(server).push(
          `UPDATE ${qualified(REFERENCE_SCHEMA, t.name)} SET ${set} WHERE ${this.keyWhere(t, sent.length + 1)}`,
          [...sent.map((c) => row.get(c)), ...this.keyValues(t, key)],
        );
      return;
    }
    const from = await this.currentShard(t, key);
    const to = await this.shardOfRow(t, row);
    const at = this.targets.placement(from);
    if (from === to) {
      const before =
        t.lookups.length > 0 ? await this.readLookupValues(at.server, at.schema, t, key, 'SELECT') : null;
      const set = sent.map((c, i) => `${quoteIdent(c)} = $${i + 1}`).join(', ');
      this.writer(at.server).push(
        `UPDATE ${qualified(at.schema, t.name)} SET ${set} WHERE ${this.keyWhere(t, sent.length + 1)}`,
        [...sent.map((c) => row.get(c)), ...this.keyValues(t, key)],
      );
      if (before) this.lookupChanges(t, before, row);
    } else {
      if (t.children.length > 0)
        throw new ShardflakeError(
          'ADOPT_FAILED',
          `the source moved a row of ${t.name} to another parent (its ${t.column} changed); rows of ${t.children.join(', ')} placed beside it would have to move too, which the adoption does not do: run adopt abort, then adopt run again`,
        );
      // The row moves: its whole old version (with the TOASTed values the update did not send) goes to the new shard.
      const list = t.columns.map((c) => `${quoteIdent(c)}::text AS ${quoteIdent(c)}`).join(', ');
      const rows = await this.writer(at.server).read(
        `DELETE FROM ${qualified(at.schema, t.name)} WHERE ${this.keyWhere(t, 1)} RETURNING ${list}`,
        this.keyValues(t, key),
      );
      const old = rows[0];
      if (!old)
        throw new ShardflakeError(
          'ADOPT_FAILED',
          `a row of ${t.name} changed by the source is not on its shard`,
        );
      const before = new Map(t.columns.map((c) => [c, old[c] as string | null]));
      const merged = new Map(
        t.columns.map((c) => [c, row.get(c) === undefined ? before.get(c) : row.get(c)]),
      );
      const target = this.targets.placement(to);
      this.writer(target.server).push(
        this.upsertSql(target.schema, t, t.columns),
        t.columns.map((c) => merged.get(c)),
      );
      this.lookupChanges(t, before, merged);
      if (t.entryId !== undefined) this.oldIdEntry(t, merged.get(t.entryId) as string, to);
    }
    if (t.entryId !== undefined) {
      const oldId = key.get(t.entryId) as string;
      const newId = row.get(t.entryId) as string;
      if (oldId !== newId) this.oldIdEntry(t, oldId, null);
      if (from === to && oldId !== newId) this.oldIdEntry(t, newId, to);
    }
  }

  private async delete(t: TableModel, key: Map<string, TupleValue>): Promise<void> {
    if (t.kind === 'reference') {
      for (const server of this.targets.servers)
        this.writer(server).push(
          `DELETE FROM ${qualified(REFERENCE_SCHEMA, t.name)} WHERE ${this.keyWhere(t, 1)}`,
          this.keyValues(t, key),
        );
      return;
    }
    const at = this.targets.placement(await this.currentShard(t, key));
    if (t.lookups.length > 0) {
      const before = await this.readLookupValues(at.server, at.schema, t, key, 'DELETE');
      if (before) this.lookupChanges(t, before, null);
    } else
      this.writer(at.server).push(
        `DELETE FROM ${qualified(at.schema, t.name)} WHERE ${this.keyWhere(t, 1)}`,
        this.keyValues(t, key),
      );
    if (t.entryId !== undefined) this.oldIdEntry(t, key.get(t.entryId) as string, null);
  }

  private async truncate(tables: readonly TableModel[]): Promise<void> {
    for (const server of this.targets.servers) {
      const w = this.writer(server);
      for (const t of tables) {
        if (t.kind === 'reference') {
          w.push(`TRUNCATE ${qualified(REFERENCE_SCHEMA, t.name)}`);
          continue;
        }
        const shards = this.targets.shardsOn(server);
        if (shards.length === 0) continue;
        w.push(`TRUNCATE ${shards.map((p) => qualified(p.schema, t.name)).join(', ')}`);
        for (const l of t.lookups)
          w.push(`TRUNCATE ${shards.map((p) => qualified(p.schema, entryTable(l.name))).join(', ')}`);
        if (t.entryId !== undefined)
          for (const p of shards)
            w.push(`DELETE FROM ${qualified(p.schema, OLD_IDS_TABLE)} WHERE tbl = $1`, [t.name]);
      }
    }
    for (const key of [...this.placed.keys()])
      if (tables.some((t) => key.startsWith(`${t.name}:`))) this.placed.delete(key);
  }
}

import type pg from 'pg';
import { OLD_IDS_TABLE } from '../config/adopt.js';
import { REFERENCE_SCHEMA } from '../config/reference.js';
import { entryTable } from '../lookups/ddl.js';
import { STABLE_TEXT_SETTINGS } from '../move/verify.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { type AdoptModel, placementSql } from './model.js';
import type { Targets } from './targets.js';

/**
 * The source and the shards compared table by table and shard by shard: on the source, each table's rows grouped
 * by the shard that owns them (the copy's own placement joins) with a count and the sum of `hashtext(row::text)`;
 * on each server, the same of every shard's copy. Text digests, because the plan widens integer id columns to
 * bigint (hash_record would differ for equal values); the settings that fix how values print are set first.
 * Reference tables are compared whole on every server; old-id and lookup entries by their counts. Call with both
 * sides inside transactions that see the same moment (cutover.ts pins them); returns what differs, one line each.
 */
interface Digest {
  rows: bigint;
  sum: bigint;
}

const key = (table: string, shard: number) => `${table}#${shard}`;

export async function compareCopies(
  model: AdoptModel,
  targets: Targets,
  source: pg.ClientBase,
  pinned: ReadonlyMap<string, pg.ClientBase>,
): Promise<string[]> {
  const settings = STABLE_TEXT_SETTINGS.join(';\n');
  const expected = new Map<string, Digest>();
  const sharded = model.order.filter((n) => model.tables.get(n)?.kind === 'sharded');
  const reference = model.order.filter((n) => model.tables.get(n)?.kind === 'reference');
  await source.query(settings);
  const wanted = { entries: new Map<string, bigint>(), lookups: new Map<string, bigint>() };
  const sourceWork = async () => {
    for (const name of sharded) {
      const { shard, from } = placementSql(model, name);
      const { rows } = await source.query(
        `SELECT ${shard} AS s, count(*)::bigint AS n, coalesce(sum(hashtext(t::text)), 0)::bigint AS h FROM ${from} GROUP BY 1`,
      );
      let total = 0n;
      for (const r of rows as { s: number; n: bigint; h: bigint }[]) {
        expected.set(key(name, Number(r.s)), { rows: BigInt(r.n), sum: BigInt(r.h) });
        total += BigInt(r.n);
      }
      const t = model.tables.get(name);
      if (t?.entryId !== undefined) wanted.entries.set(name, total);
      for (const l of t?.lookups ?? []) {
        const { rows: c } = await source.query(
          `SELECT count(${quoteIdent(l.column)})::bigint AS n FROM ${qualified(model.adopt.schema, name)}`,
        );
        wanted.lookups.set(l.name, BigInt((c[0] as { n: bigint }).n));
      }
    }
    for (const name of reference) {
      const { rows } = await source.query(
        `SELECT count(*)::bigint AS n, coalesce(sum(hashtext(t::text)), 0)::bigint AS h FROM ${qualified(model.adopt.schema, name)} AS t`,
      );
      const r = rows[0] as { n: bigint; h: bigint };
      expected.set(key(name, -1), { rows: BigInt(r.n), sum: BigInt(r.h) });
    }
  };
  const found = new Map<string, Digest>();
  const entries = new Map<string, bigint>();
  const lookups = new Map<string, bigint>();
  const targetWork = async (server: string, client: pg.ClientBase) => {
    await client.query(settings);
    const shards = targets.shardsOn(server);
    const parts: string[] = [];
    for (const p of shards)
      sharded.forEach((name, i) => {
        parts.push(
          `SELECT ${p.shard} AS s, ${i} AS t, count(*)::bigint AS n, coalesce(sum(hashtext(r::text)), 0)::bigint AS h FROM ${qualified(p.schema, name)} AS r`,
        );
      });
    reference.forEach((name, i) => {
      parts.push(
        `SELECT -1 AS s, ${sharded.length + i} AS t, count(*)::bigint AS n, coalesce(sum(hashtext(r::text)), 0)::bigint AS h FROM ${qualified(REFERENCE_SCHEMA, name)} AS r`,
      );
    });
    const all = [...sharded, ...reference];
    for (let i = 0; i < parts.length; i += 2000) {
      const { rows } = await client.query(parts.slice(i, i + 2000).join(' UNION ALL '));
      for (const r of rows as { s: number; t: number; n: bigint; h: bigint }[]) {
        const name = all[r.t] as string;
        const d = { rows: BigInt(r.n), sum: BigInt(r.h) };
        if (r.s === -1) {
          const k = `${key(name, -1)}@${server}`;
          found.set(k, d);
        } else if (d.rows > 0n) found.set(key(name, Number(r.s)), d);
      }
    }
    const counts = async (
      table: (schema: string) => string,
      into: Map<string, bigint>,
      label: string,
      byTbl: boolean,
    ) => {
      const list = shards.map(
        (p) =>
          `SELECT ${byTbl ? 'tbl' : `'${label}'`} AS k, count(*)::bigint AS n FROM ${table(p.schema)}${byTbl ? ' GROUP BY tbl' : ''}`,
      );
      for (let i = 0; i < list.length; i += 2000) {
        const { rows } = await client.query(list.slice(i, i + 2000).join(' UNION ALL '));
        for (const r of rows as { k: string; n: bigint }[])
          into.set(r.k, (into.get(r.k) ?? 0n) + BigInt(r.n));
      }
    };
    if ([...model.tables.values()].some((t) => t.entryId !== undefined))
      await counts((s) => qualified(s, OLD_IDS_TABLE), entries, '', true);
    for (const l of model.config.lookups ?? [])
      await counts((s) => qualified(s, entryTable(l.name)), lookups, l.name, false);
  };
  await Promise.all([sourceWork(), ...[...pinned].map(([server, client]) => targetWork(server, client))]);

  const differences: string[] = [];
  for (const [k, want] of expected) {
    const [table, shardText] = k.split('#') as [string, string];
    const shard = Number(shardText);
    if (shard === -1) {
      for (const server of targets.servers) {
        const got = found.get(`${k}@${server}`);
        if (!got || got.rows !== want.rows || got.sum !== want.sum)
          differences.push(
            `reference table ${table} on server ${server}: ${got ? `${got.rows} rows` : 'missing'}, the source has ${want.rows}${got && got.rows === want.rows ? ' (different contents)' : ''}`,
          );
      }
      continue;
    }
    const got = found.get(k);
    if (!got || got.rows !== want.rows)
      differences.push(
        `${table} in shard ${shard}: ${got?.rows ?? 0n} rows, the source has ${want.rows} for it`,
      );
    else if (got.sum !== want.sum)
      differences.push(
        `${table} in shard ${shard}: ${want.rows} rows as on the source, but different contents`,
      );
  }
  for (const [k, got] of found) {
    if (k.includes('@')) continue;
    if (!expected.has(k)) {
      const [table, shard] = k.split('#');
      differences.push(`${table} in shard ${shard}: ${got.rows} rows that the source does not place there`);
    }
  }
  for (const [table, want] of wanted.entries)
    if ((entries.get(table) ?? 0n) !== want)
      differences.push(
        `old-id entries of ${table}: ${entries.get(table) ?? 0n}, the source has ${want} rows`,
      );
  for (const [lookup, want] of wanted.lookups)
    if ((lookups.get(lookup) ?? 0n) !== want)
      differences.push(
        `lookup ${lookup}: ${lookups.get(lookup) ?? 0n} entries, the source has ${want} values`,
      );
  return differences;
}

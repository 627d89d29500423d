import type pg from 'pg';
import { connect, defineLayout, type GeneratorSqlOptions, installGenerator, layouts } from 'shardflake';
import { qualified } from '../../packages/shardflake/src/postgres/identifier.js';

/**
 * Instagram's shape with a 2-bit sequence (4 ids per tick), so that a single statement outruns the clock by far.
 * 21 shard bits: the in-database generator needs 2^(shard + sequence bits) > 2^sequence bits + 2^18.
 */
export const narrowLayout = defineLayout({
  name: 'narrow',
  epoch: layouts.instagram.epoch,
  timeUnitMs: 1,
  fields: [
    { kind: 'time', bits: 41 },
    { kind: 'shard', bits: 21 },
    { kind: 'sequence', bits: 2 },
  ],
});

/** Installs a generator into `schema` and creates `<schema>.items (id DEFAULT next_id(), v)`; returns its name. */
export async function shardWithTable(client: pg.Client, options: GeneratorSqlOptions): Promise<string> {
  await installGenerator(client, options);
  const table = qualified(options.schema, 'items');
  await client.query(
    `CREATE TABLE ${table} (id bigint PRIMARY KEY DEFAULT ${qualified(options.schema, 'next_id')}(), v integer)`,
  );
  return table;
}

/** `count` connections to `url`, closed by the returned function. */
export async function sessions(
  url: string,
  count: number,
): Promise<{ all: pg.Client[]; close: () => Promise<void> }> {
  const all = await Promise.all(Array.from({ length: count }, () => connect(url)));
  return { all, close: async () => void (await Promise.all(all.map((c) => c.end()))) };
}

/** Replaces a test-clock install's time source with a constant (ms since 1970) or an SQL expression. */
export async function setTestClock(client: pg.Client, schema: string, ms: number | string): Promise<void> {
  const body = typeof ms === 'number' ? `${ms}::float8` : ms;
  await client.query(
    `CREATE OR REPLACE FUNCTION ${qualified(schema, 'next_id_clock_ms')}() RETURNS float8 LANGUAGE sql VOLATILE RETURN ${body}`,
  );
}

import { cpus } from 'node:os';
import type pg from 'pg';
import { connect, describeUrl } from '../postgres/connect.js';
import { type EmbeddedServer, startEmbeddedServer } from '../postgres/embedded.js';
import { GENERATOR_OBJECTS } from '../postgres/generator-sql.js';
import { qualified, quoteIdent } from '../postgres/identifier.js';
import { installGenerator } from '../postgres/install.js';

/**
 * `bench sql`: the in-database generator against `bigserial` on the same server in one run. Every figure is a
 * ratio of medians over alternating rounds (the order flips each round), so that drift on a shared machine hits
 * both sides.
 * - bulk: one `INSERT … SELECT generate_series(1, rows)` into a table whose primary key defaults to the generator,
 *   and the same into a bigserial table; also how far the last id's time bits ran ahead of the clock.
 * - single: single-row autocommit inserts (prepared, `synchronous_commit = off` so the commit flush does not hide
 *   the generator's cost) from `clients` connections for `seconds` each.
 * - calls: `SELECT count(next_id())` against `SELECT count(nextval(…))` over `callRows` rows.
 */
export interface SqlBenchOptions {
  /** A server to use instead of starting an embedded one (its `public` schema stays untouched). */
  url?: string;
  /** Rows of the bulk INSERT … SELECT (default 1,000,000). */
  rows?: number;
  /** Rounds per measurement (default 3). */
  rounds?: number;
  /** Connections for single-row inserts (default 2). */
  clients?: number;
  /** Seconds of single-row inserts per side per round (default 3). */
  seconds?: number;
  /** Rows for the calls-per-second comparison (default 1,000,000). */
  callRows?: number;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface SqlBenchSide {
  /** One value per round. */
  samples: number[];
  median: number;
}

export interface SqlBenchNextIdResult {
  /** Bulk time; ratio = median / bigserial's median (lower is better); how far the last id ran ahead, per round. */
  bulk: { ms: SqlBenchSide; ratio: number; aheadMs: number[] };
  /** Single-row inserts per second; ratio = median / bigserial's (higher is better). */
  single: { perSecond: SqlBenchSide; ratio: number };
  /** next_id() calls per second; ratio = median / nextval()'s. */
  calls: { perSecond: SqlBenchSide; ratio: number };
}

export interface SqlBenchResult {
  server: { version: string; url: string; embedded: boolean };
  machine: { cpus: number; node: string };
  settings: { rows: number; rounds: number; clients: number; seconds: number; callRows: number };
  bigserial: {
    bulkMs: SqlBenchSide;
    singlePerSecond: SqlBenchSide;
    nextvalPerSecond: SqlBenchSide;
  };
  nextId: SqlBenchNextIdResult;
}

const DEFAULTS = {
  rows: 1_000_000,
  rounds: 3,
  clients: 2,
  seconds: 3,
  callRows: 1_000_000,
};

const BENCH_SCHEMA = 'shardflake_bench';

function side(samples: number[]): SqlBenchSide {
  const sorted = [...samples].sort((a, b) => a - b);
  return { samples, median: sorted[Math.floor(sorted.length / 2)] as number };
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

async function timedMs(client: pg.Client, sql: string): Promise<number> {
  const started = performance.now();
  await client.query(sql);
  return performance.now() - started;
}

/** Single-row inserts from `clients` connections for `seconds`; returns inserts per second. */
async function singleRowRate(connections: pg.Client[], table: string, seconds: number): Promise<number> {
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  const counts = await Promise.all(
    connections.map(async (c, i) => {
      let n = 0;
      // A named statement: parsed and planned once per connection, like pgbench -M prepared.
      const statement = { name: `insert ${table}`, text: `INSERT INTO ${table} (v) VALUES ($1)` };
      while (performance.now() < deadline) {
        await c.query({ ...statement, values: [i] });
        n++;
      }
      return n;
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return counts.reduce((a, b) => a + b, 0) / elapsed;
}

/** Runs the benchmark and returns JSON-able figures. */
export async function runSqlBench(options: SqlBenchOptions = {}): Promise<SqlBenchResult> {
  const opts = {
    ...DEFAULTS,
    ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)),
  };
  const progress = options.onProgress ?? (() => {});
  const server: EmbeddedServer | undefined = options.url ? undefined : await startEmbeddedServer('bench-sql');
  const url = options.url ?? (server as EmbeddedServer).url;
  const admin = await connect(url, { applicationName: 'shardflake bench sql' });
  const clients: pg.Client[] = [];
  try {
    const version = String((await admin.query('SHOW server_version')).rows[0].server_version);
    const schema = `${BENCH_SCHEMA}_next_id`;
    const serial = qualified(BENCH_SCHEMA, 't_bigserial');
    const nextIdTable = qualified(schema, 't_next_id');
    for (const name of [BENCH_SCHEMA, schema]) {
      await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdent(name)} CASCADE`);
    }
    await admin.query(`CREATE SCHEMA ${quoteIdent(BENCH_SCHEMA)}`);
    await admin.query(`CREATE TABLE ${serial} (id bigserial PRIMARY KEY, v integer)`);
    await installGenerator(admin, { schema, shard: 1 });
    await admin.query(
      `CREATE TABLE ${nextIdTable} (id bigint PRIMARY KEY DEFAULT ${qualified(schema, GENERATOR_OBJECTS.nextId)}(), v integer)`,
    );
    const serialSeq = qualified(BENCH_SCHEMA, 't_bigserial_id_seq');
    type Key = 'bigserial' | 'next_id';
    const all: { key: Key; table: string }[] = [
      { key: 'bigserial', table: serial },
      { key: 'next_id', table: nextIdTable },
    ];
    const order = (round: number) => (round % 2 === 0 ? all : [...all].reverse());
    const totalSteps = opts.rounds * 3;
    let step = 0;

    // Bulk INSERT … SELECT.
    const bulk = new Map<string, number[]>();
    const ahead = new Map<string, number[]>();
    for (let round = 0; round < opts.rounds; round++) {
      for (const { key, table } of order(round)) {
        await admin.query(`TRUNCATE ${table}`);
        await admin.query('CHECKPOINT');
        const ms = await timedMs(
          admin,
          `INSERT INTO ${table} (v) SELECT 1 FROM generate_series(1, ${opts.rows})`,
        );
        bulk.set(key, [...(bulk.get(key) ?? []), ms]);
        if (key === 'next_id') {
          const { rows } = await admin.query(
            `SELECT (extract(epoch FROM ${qualified(schema, GENERATOR_OBJECTS.idToTimestamp)}(max(id)) - clock_timestamp()) * 1000)::float8 AS ahead FROM ${table}`,
          );
          ahead.set(key, [...(ahead.get(key) ?? []), round3(Number(rows[0].ahead))]);
        }
      }
      await admin.query(all.map((t) => `TRUNCATE ${t.table}`).join(';'));
      progress('bulk', ++step, totalSteps);
    }

    // Single-row inserts from `clients` connections.
    for (let i = 0; i < opts.clients; i++) {
      const c = await connect(url, { applicationName: 'shardflake bench sql' });
      await c.query('SET synchronous_commit = off');
      clients.push(c);
    }
    const single = new Map<string, number[]>();
    for (let round = 0; round < opts.rounds; round++) {
      for (const { key, table } of order(round)) {
        const rate = await singleRowRate(clients, table, opts.seconds);
        single.set(key, [...(single.get(key) ?? []), rate]);
      }
      progress('single', ++step, totalSteps);
    }

    // Calls per second.
    const calls = new Map<string, number[]>();
    for (let round = 0; round < opts.rounds; round++) {
      for (const { key } of order(round)) {
        const expr =
          key === 'bigserial'
            ? `pg_catalog.nextval('${serialSeq.replaceAll("'", "''")}'::regclass)`
            : `${qualified(schema, GENERATOR_OBJECTS.nextId)}()`;
        const ms = await timedMs(admin, `SELECT count(${expr}) FROM generate_series(1, ${opts.callRows})`);
        calls.set(key, [...(calls.get(key) ?? []), opts.callRows / (ms / 1000)]);
      }
      progress('calls', ++step, totalSteps);
    }
    await admin.query(`DROP SCHEMA ${quoteIdent(BENCH_SCHEMA)}, ${quoteIdent(schema)} CASCADE`);

    const base = {
      bulkMs: side(bulk.get('bigserial') ?? []),
      singlePerSecond: side(single.get('bigserial') ?? []),
      nextvalPerSecond: side(calls.get('bigserial') ?? []),
    };
    return {
      server: { version, url: describeUrl(url), embedded: server !== undefined },
      machine: { cpus: cpus().length, node: process.version },
      settings: {
        rows: opts.rows,
        rounds: opts.rounds,
        clients: opts.clients,
        seconds: opts.seconds,
        callRows: opts.callRows,
      },
      bigserial: base,
      nextId: (() => {
        const b = side(bulk.get('next_id') ?? []);
        const s = side(single.get('next_id') ?? []);
        const c = side(calls.get('next_id') ?? []);
        return {
          bulk: { ms: b, ratio: round3(b.median / base.bulkMs.median), aheadMs: ahead.get('next_id') ?? [] },
          single: { perSecond: s, ratio: round3(s.median / base.singlePerSecond.median) },
          calls: { perSecond: c, ratio: round3(c.median / base.nextvalPerSecond.median) },
        };
      })(),
    };
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => {})));
    await admin.end().catch(() => {});
    await server?.stop();
  }
}

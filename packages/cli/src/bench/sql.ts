import { readFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { type EmbeddedServer, startEmbeddedServer } from '@shardflake/embedded';
import type pg from 'pg';
import { connect, describeUrl } from 'shardflake/internal/postgres/connect.js';
import {
  DEFAULT_GENERATOR_LANGUAGE,
  GENERATOR_LANGUAGES,
  GENERATOR_OBJECTS,
  type GeneratorLanguage,
} from 'shardflake/internal/postgres/generator-sql.js';
import { qualified, quoteIdent } from 'shardflake/internal/postgres/identifier.js';
import { installGenerator } from 'shardflake/internal/postgres/install.js';
import { findPgbench, type Pgbench, pgbenchInsertRates } from './pgbench.js';

/**
 * `bench sql`: the in-database generator, written both ways (`plpgsql`, the default, and `sql`: inlined), against
 * `bigserial` on the same server in one run. Every ratio is the median over rounds of that round's ratio to
 * bigserial; each round measures every side back to back and the order flips each round, so that drift on a
 * shared machine hits every side alike.
 * - bulk: one `INSERT … SELECT generate_series(1, rows)` into a table whose primary key defaults to the generator,
 *   and the same into a bigserial table; also how far the last id's time bits ran ahead of the clock; and the
 *   default install's table filled by a statement that names `next_id_bulk()` (the inlined body, installed
 *   whatever the language) instead of leaving the id to the default.
 * - single-row autocommit inserts from `clients` connections for `seconds` per round, `synchronous_commit = off`
 *   so that the commit flush does not hide the generator's cost, every side in the same run, interleaved insert by
 *   insert (a rate is `clients` / that side's mean latency), by four clients of the server:
 *   - pgbench in its default simple protocol (every INSERT parsed and planned: what psql sends, and node-postgres,
 *     Knex, Kysely, Drizzle or TypeORM send without a statement name, unnamed statements being planned alike) and
 *     with `-M prepared` (planned once per connection); skipped, with the reason, when no pgbench is found;
 *   - node-postgres, unnamed (`query(text, values)`: parsed and planned for every insert) and named
 *     (`{ name, text, values }`: planned once per connection).
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
  /** Seconds of single-row inserts per side per round (default 3; whole seconds, as pgbench counts them). */
  seconds?: number;
  /** Rows for the calls-per-second comparison (default 1,000,000). */
  callRows?: number;
  /** The pgbench binary (default: `pgbench` on PATH, else the newest /usr/lib/postgresql/N/bin/pgbench). */
  pgbench?: string;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface SqlBenchSide {
  /** One value per round. */
  samples: number[];
  median: number;
}

/** A figure of one generator variant and its ratio to bigserial's in the same run. */
export interface SqlBenchRatio {
  value: SqlBenchSide;
  /** Per round: this side's value / bigserial's in the same round (lower is better for times, higher for rates). */
  ratios: number[];
  /** The median of `ratios`: pairing each round with its own baseline cancels the machine's slow drift. */
  ratio: number;
}

export interface SqlBenchVariantResult {
  language: GeneratorLanguage;
  /** Bulk time in ms, and how far the last id's time bits were ahead of the clock right after, per round. */
  bulk: SqlBenchRatio & { aheadMs: number[] };
  /** CPU time of the server process that ran each bulk statement, in ms (embedded servers only, else null). */
  bulkCpu: SqlBenchRatio | null;
  /** Single-row inserts per second from pgbench, simple and prepared protocol (null when pgbench was skipped). */
  pgbenchSimple: SqlBenchRatio | null;
  pgbenchPrepared: SqlBenchRatio | null;
  /** Single-row inserts per second from node-postgres, named (prepared) and unnamed statements. */
  singlePrepared: SqlBenchRatio;
  singleUnprepared: SqlBenchRatio;
  /** next_id() calls per second against nextval(). */
  calls: SqlBenchRatio;
}

export interface SqlBenchResult {
  server: { version: string; url: string; embedded: boolean };
  machine: { cpus: number; node: string };
  settings: { rows: number; rounds: number; clients: number; seconds: number; callRows: number };
  /** The pgbench that ran, or why none did. */
  pgbench: Pgbench | { skipped: string };
  bigserial: {
    bulkMs: SqlBenchSide;
    bulkCpuMs: SqlBenchSide | null;
    pgbenchSimplePerSecond: SqlBenchSide | null;
    pgbenchPreparedPerSecond: SqlBenchSide | null;
    singlePreparedPerSecond: SqlBenchSide;
    singleUnpreparedPerSecond: SqlBenchSide;
    nextvalPerSecond: SqlBenchSide;
  };
  /** One entry per way of writing next_id(), the default (`plpgsql`) first. */
  variants: SqlBenchVariantResult[];
  /** The bulk insert into the default install's table naming `next_id_bulk()`: time and server CPU vs bigserial. */
  nextIdBulk: { bulk: SqlBenchRatio & { aheadMs: number[] }; bulkCpu: SqlBenchRatio | null };
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

/** CPU time a process of this machine has run, in ms (Linux: /proc/PID/schedstat counts it in ns). */
async function cpuMsOf(pid: number): Promise<number> {
  const [ns] = (await readFile(`/proc/${pid}/schedstat`, 'utf8')).split(' ');
  return Number(ns) / 1e6;
}

async function timedMs(client: pg.Client, sql: string): Promise<number> {
  const started = performance.now();
  await client.query(sql);
  return performance.now() - started;
}

/**
 * Single-row inserts from `clients` connections for `seconds`, every connection taking the tables in turn, insert
 * by insert (so that every table meets the same load; see pgbenchInsertRates); returns, per table, inserts per
 * second at its mean latency (`clients` / mean latency).
 */
async function singleRowRates(
  connections: pg.Client[],
  tables: readonly string[],
  seconds: number,
  prepared: boolean,
): Promise<number[]> {
  const deadline = performance.now() + seconds * 1000;
  const totalMs = tables.map(() => 0);
  const counts = tables.map(() => 0);
  await Promise.all(
    connections.map(async (c, i) => {
      const statements = tables.map((table) => {
        const text = `INSERT INTO ${table} (v) VALUES ($1)`;
        // Named: parsed and planned once per connection. Unnamed: parsed and planned for every insert.
        return prepared ? { name: `insert ${table}`, text } : { text };
      });
      for (let turn = i; performance.now() < deadline; turn++) {
        const t = turn % tables.length;
        const started = performance.now();
        await c.query({ ...(statements[t] as { text: string }), values: [i] });
        totalMs[t] = (totalMs[t] as number) + performance.now() - started;
        counts[t] = (counts[t] as number) + 1;
      }
    }),
  );
  return tables.map((_, t) => (connections.length * 1000 * (counts[t] as number)) / (totalMs[t] as number));
}

type Key = 'bigserial' | GeneratorLanguage | 'next_id_bulk';

/** Runs the benchmark and returns JSON-able figures. */
export async function runSqlBench(options: SqlBenchOptions = {}): Promise<SqlBenchResult> {
  const opts = {
    ...DEFAULTS,
    ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)),
  };
  const progress = options.onProgress ?? (() => {});
  // Found first, so that a wrong --pgbench stops the run before any server starts.
  const pgbench = await findPgbench(options.pgbench);
  const server: EmbeddedServer | undefined = options.url ? undefined : await startEmbeddedServer('bench-sql');
  const url = options.url ?? (server as EmbeddedServer).url;
  const admin = await connect(url, { applicationName: 'shardflake bench sql' });
  const clients: pg.Client[] = [];
  const schemaOf = (language: GeneratorLanguage) => `${BENCH_SCHEMA}_${language}`;
  const schemas = [BENCH_SCHEMA, ...GENERATOR_LANGUAGES.map(schemaOf)];
  try {
    const version = String((await admin.query('SHOW server_version')).rows[0].server_version);
    for (const name of schemas) await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdent(name)} CASCADE`);
    await admin.query(`CREATE SCHEMA ${quoteIdent(BENCH_SCHEMA)}`);
    const serial = qualified(BENCH_SCHEMA, 't_bigserial');
    await admin.query(`CREATE TABLE ${serial} (id bigserial PRIMARY KEY, v integer)`);
    const all: { key: Key; table: string; nextId?: string }[] = [{ key: 'bigserial', table: serial }];
    for (const [i, language] of GENERATOR_LANGUAGES.entries()) {
      const schema = schemaOf(language);
      await installGenerator(admin, { schema, shard: i + 1, language });
      const nextId = `${qualified(schema, GENERATOR_OBJECTS.nextId)}()`;
      const table = qualified(schema, 't_next_id');
      await admin.query(`CREATE TABLE ${table} (id bigint PRIMARY KEY DEFAULT ${nextId}, v integer)`);
      all.push({ key: language, table, nextId });
    }
    const serialSeq = qualified(BENCH_SCHEMA, 't_bigserial_id_seq');
    const order = <T>(round: number, sides: T[]) => (round % 2 === 0 ? sides : [...sides].reverse());
    const defaultSchema = schemaOf(DEFAULT_GENERATOR_LANGUAGE);
    const bulkSides: { key: Key; table: string; id?: string }[] = [
      ...all,
      {
        key: 'next_id_bulk',
        table: qualified(defaultSchema, 't_next_id'),
        id: `${qualified(defaultSchema, GENERATOR_OBJECTS.nextIdBulk)}()`,
      },
    ];
    const totalSteps = opts.rounds * (pgbench ? 6 : 4);
    let step = 0;
    const samples = new Map<string, number[]>();
    const record = (what: string, key: Key, value: number) => {
      const name = `${what}:${key}`;
      samples.set(name, [...(samples.get(name) ?? []), value]);
    };
    const ahead = new Map<Key, number[]>();

    // Bulk INSERT … SELECT. On an embedded server (on this machine, so its process is ours to read) also the CPU
    // time of the backend that ran it: other programs' load stretches the wall time far more than the CPU time.
    let backend = server ? Number((await admin.query('SELECT pg_backend_pid() AS pid')).rows[0].pid) : null;
    if (backend !== null && !(await cpuMsOf(backend).catch(() => null))) backend = null;
    for (let round = 0; round < opts.rounds; round++) {
      for (const { key, table, id } of order(round, bulkSides)) {
        await admin.query(`TRUNCATE ${table}`);
        await admin.query('CHECKPOINT');
        const cpuBefore = backend === null ? 0 : await cpuMsOf(backend);
        const ms = await timedMs(
          admin,
          id
            ? `INSERT INTO ${table} (id, v) SELECT ${id}, 1 FROM generate_series(1, ${opts.rows})`
            : `INSERT INTO ${table} (v) SELECT 1 FROM generate_series(1, ${opts.rows})`,
        );
        record('bulk', key, ms);
        if (backend !== null) record('bulk cpu', key, (await cpuMsOf(backend)) - cpuBefore);
        if (key !== 'bigserial') {
          const schema = key === 'next_id_bulk' ? defaultSchema : schemaOf(key);
          const { rows } = await admin.query(
            `SELECT (extract(epoch FROM ${qualified(schema, GENERATOR_OBJECTS.idToTimestamp)}(max(id)) - clock_timestamp()) * 1000)::float8 AS ahead FROM ${table}`,
          );
          ahead.set(key, [...(ahead.get(key) ?? []), round3(Number(rows[0].ahead))]);
        }
      }
      await admin.query(all.map((t) => `TRUNCATE ${t.table}`).join(';'));
      progress('bulk', ++step, totalSteps);
    }

    // Single-row inserts, every table in the same run (see pgbenchInsertRates): pgbench in the simple, then the
    // prepared protocol, then node-postgres with named, then unnamed statements.
    const measure = async (what: string, rates: (tables: string[]) => Promise<number[]>): Promise<void> => {
      for (let round = 0; round < opts.rounds; round++) {
        const sides = order(round, all);
        const values = await rates(sides.map((s) => s.table));
        for (const [i, { key }] of sides.entries()) record(what, key, values[i] as number);
        progress(`single-row ${what}`, ++step, totalSteps);
      }
    };
    const settings = { clients: opts.clients, seconds: opts.seconds };
    for (const protocol of pgbench ? (['simple', 'prepared'] as const) : []) {
      await measure(`pgbench ${protocol}`, (tables) =>
        pgbenchInsertRates(pgbench as Pgbench, url, tables, { ...settings, protocol }),
      );
    }
    for (let i = 0; i < opts.clients; i++) {
      const c = await connect(url, { applicationName: 'shardflake bench sql' });
      await c.query('SET synchronous_commit = off');
      clients.push(c);
    }
    await measure('prepared', (tables) => singleRowRates(clients, tables, opts.seconds, true));
    await measure('unprepared', (tables) => singleRowRates(clients, tables, opts.seconds, false));

    // Calls per second.
    for (let round = 0; round < opts.rounds; round++) {
      for (const { key, nextId } of order(round, all)) {
        const expr = nextId ?? `pg_catalog.nextval('${serialSeq.replaceAll("'", "''")}'::regclass)`;
        const ms = await timedMs(admin, `SELECT count(${expr}) FROM generate_series(1, ${opts.callRows})`);
        record('calls', key, opts.callRows / (ms / 1000));
      }
      progress('calls', ++step, totalSteps);
    }
    await admin.query(`DROP SCHEMA ${schemas.map((s) => quoteIdent(s)).join(', ')} CASCADE`);

    const of = (what: string, key: Key) => side(samples.get(`${what}:${key}`) ?? []);
    const versus = (what: string, key: Key): SqlBenchRatio => {
      const value = of(what, key);
      const baseline = of(what, 'bigserial').samples;
      const ratios = value.samples.map((v, round) => round3(v / (baseline[round] as number)));
      return { value, ratios, ratio: side(ratios).median };
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
      pgbench: pgbench ?? { skipped: 'no pgbench binary found on PATH or in /usr/lib/postgresql/*/bin' },
      bigserial: {
        bulkMs: of('bulk', 'bigserial'),
        bulkCpuMs: backend === null ? null : of('bulk cpu', 'bigserial'),
        pgbenchSimplePerSecond: pgbench ? of('pgbench simple', 'bigserial') : null,
        pgbenchPreparedPerSecond: pgbench ? of('pgbench prepared', 'bigserial') : null,
        singlePreparedPerSecond: of('prepared', 'bigserial'),
        singleUnpreparedPerSecond: of('unprepared', 'bigserial'),
        nextvalPerSecond: of('calls', 'bigserial'),
      },
      variants: GENERATOR_LANGUAGES.map((language) => ({
        language,
        bulk: { ...versus('bulk', language), aheadMs: ahead.get(language) ?? [] },
        bulkCpu: backend === null ? null : versus('bulk cpu', language),
        pgbenchSimple: pgbench ? versus('pgbench simple', language) : null,
        pgbenchPrepared: pgbench ? versus('pgbench prepared', language) : null,
        singlePrepared: versus('prepared', language),
        singleUnprepared: versus('unprepared', language),
        calls: versus('calls', language),
      })),
      nextIdBulk: {
        bulk: { ...versus('bulk', 'next_id_bulk'), aheadMs: ahead.get('next_id_bulk') ?? [] },
        bulkCpu: backend === null ? null : versus('bulk cpu', 'next_id_bulk'),
      },
    };
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => {})));
    await admin.end().catch(() => {});
    await server?.stop();
  }
}

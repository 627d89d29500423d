import { cpus } from 'node:os';
import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import type pg from 'pg';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { validateConfig } from 'shardflake/internal/config/config.js';
import { createPool } from 'shardflake/internal/postgres/connect.js';
import { createRouter, type Router } from 'shardflake/internal/router/router.js';
import { median, percentile } from './stats.js';

/**
 * Part (c) of `bench cross`: a write of a reference table through `router.withReference` on 1, 2 and 4 servers,
 * against the same write in one local transaction on one server with plain `pg` (the baseline), all in one run on
 * embedded servers (fsync on, synchronous_commit on: a commit waits for its WAL flush, which is what 2PC multiplies).
 *
 * The write: `UPDATE plans SET hits = hits + 1 WHERE id = $1` over 100 rows (so concurrent writers rarely meet),
 * an unnamed statement (parsed and planned each time, as most clients send it). With one server withReference is
 * one local transaction; with several it is a cross-server transaction (prepare all but the first server, commit
 * the first with the decision row, commit the prepared ones: transactions/cross.ts), and every statement runs on
 * the first server before the others (reference/write.ts).
 *
 * Common path first: each side's first `coldWrites` writes run one at a time on a new router (cold pool: the
 * connections are opened by those writes), and are reported apart. Then `rounds` rounds of `writes` writes with
 * `concurrency` in flight, every side once per round, the order of the sides rotating each round so the machine's
 * drift hits all alike; a side's ratio is the median over rounds of its rate / the baseline's rate in that round.
 */
export interface ReferenceBenchOptions {
  /** Server counts to measure withReference on (default [1, 2, 4]). */
  servers?: number[];
  /** Writes per side per round (default 400). */
  writes?: number;
  /** Rounds (default 5). */
  rounds?: number;
  /** Writes in flight (default 4). */
  concurrency?: number;
  /** Writes on a cold pool, one at a time, per side (default 20). */
  coldWrites?: number;
  /** Run the servers with fsync on (default true). */
  fsync?: boolean;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export interface ReferenceBenchSide {
  /** `baseline` (one local transaction, plain pg) or `withReference on N servers`. */
  name: string;
  servers: number;
  /** Writes per second, one value per round. */
  perSecond: number[];
  median: number;
  /** Median over rounds of this side's rate / the baseline's rate in the same round (1 for the baseline). */
  ratio: number;
  p50Ms: number;
  p99Ms: number;
  /** The first writes on a new pool, one at a time: connection setup included. */
  cold: { writes: number; p50Ms: number; p99Ms: number };
}

export interface ReferenceBenchResult {
  machine: { cpus: number; node: string };
  settings: {
    writes: number;
    rounds: number;
    concurrency: number;
    coldWrites: number;
    fsync: string;
    synchronousCommit: string;
  };
  sides: ReferenceBenchSide[];
}

const DEFAULTS = { servers: [1, 2, 4], writes: 400, rounds: 5, concurrency: 4, coldWrites: 20 };
const ROWS = 100;
const UPDATE = 'UPDATE plans SET hits = hits + 1 WHERE id = $1';

interface Side {
  name: string;
  servers: number;
  /** One write; resolves when committed. */
  write: (i: number) => Promise<unknown>;
  latencies: number[];
  rates: number[];
  cold: number[];
}

const ms = (x: number) => Number(x.toFixed(2));

async function timed(side: Side, count: number, concurrency: number, into: number[]): Promise<number> {
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    for (let i = next++; i < count; i = next++) {
      const t = performance.now();
      await side.write(i);
      into.push(performance.now() - t);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return count / ((performance.now() - started) / 1000);
}

export async function runReferenceBench(options: ReferenceBenchOptions = {}): Promise<ReferenceBenchResult> {
  const given = Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
  const opts = { ...DEFAULTS, ...given } as typeof DEFAULTS & ReferenceBenchOptions;
  const progress = opts.onProgress ?? (() => {});
  const counts = [...new Set(opts.servers)].sort((a, b) => a - b);
  const most = Math.max(1, ...counts);
  const servers: EmbeddedServer[] = await startEmbeddedServers(
    most,
    opts.fsync === false ? { settings: { fsync: 'off' } } : {},
  );
  const routers: Router[] = [];
  let pool: pg.Pool | undefined;
  try {
    // One cluster per server count, each in a database of its own on the first N servers: a router writes every
    // copy its cluster's catalog knows (reference/servers.ts), so N copies need a cluster of N servers.
    const urlOf = (server: EmbeddedServer, n: number) => {
      const url = new URL(server.url);
      url.pathname = `/reference_${n}`;
      return url.toString();
    };
    // The baseline writes the one copy of the one-server cluster (a copy of a bigger cluster written alone would
    // differ from its other copies, which withReference refuses to build on).
    const clusters = [...new Set([1, ...counts])];
    for (const server of servers) {
      const admin = createPool(server.url, { max: 1 });
      try {
        for (const n of clusters)
          if (servers.indexOf(server) < n) await admin.query(`CREATE DATABASE reference_${n}`);
      } finally {
        await admin.end();
      }
    }
    const configOf = (n: number) =>
      validateConfig(
        {
          servers: Object.fromEntries(servers.slice(0, n).map((s) => [s.name, urlOf(s, n)])),
          catalog: servers[0]?.name,
          logicalShards: n * 2,
          tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), caption text)' },
          referenceTables: {
            plans: 'CREATE TABLE plans (id int PRIMARY KEY, hits bigint NOT NULL DEFAULT 0)',
          },
        },
        'bench config',
      );
    for (const n of clusters) {
      await initCluster(configOf(n));
      const seeder = await createRouter(configOf(n), { listen: false });
      await seeder.withReference((s) =>
        s.query('INSERT INTO plans (id) SELECT generate_series(0, $1)', [ROWS - 1]),
      );
      await seeder.close();
    }

    const first = servers[0] as EmbeddedServer;
    pool = createPool(urlOf(first, 1), {
      max: opts.concurrency,
      applicationName: 'bench reference baseline',
    });
    const baselinePool = pool;
    const settings = await baselinePool.query(
      "SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS sc",
    );
    const sides: Side[] = [
      {
        name: 'baseline: one local transaction on one server (pg)',
        servers: 1,
        latencies: [],
        rates: [],
        cold: [],
        write: async (i) => {
          const client = await baselinePool.connect();
          try {
            // The same guard mark withReference sets, so both sides do the same work on the server.
            await client.query('BEGIN; SET LOCAL search_path TO shardflake_reference');
            await client.query('SELECT shardflake_reference._shardflake_begin_write()');
            await client.query(UPDATE, [i % ROWS]);
            await client.query('COMMIT');
          } catch (error) {
            await client.query('ROLLBACK').catch(() => {});
            throw error;
          } finally {
            client.release();
          }
        },
      },
    ];
    for (const n of counts) {
      const router = await createRouter(configOf(n), { poolSize: opts.concurrency, listen: false });
      routers.push(router);
      sides.push({
        name: `withReference on ${n} server${n === 1 ? '' : 's'}`,
        servers: n,
        latencies: [],
        rates: [],
        cold: [],
        write: (i) => router.withReference((s) => s.query(UPDATE, [i % ROWS])),
      });
    }

    // Cold: every pool is new; the first writes open its connections.
    for (const side of sides) await timed(side, opts.coldWrites, 1, side.cold);
    progress('cold', 1, 1);
    for (let round = 0; round < opts.rounds; round++) {
      for (let k = 0; k < sides.length; k++) {
        const side = sides[(round + k) % sides.length] as Side;
        side.rates[round] = await timed(side, opts.writes, opts.concurrency, side.latencies);
      }
      progress('rounds', round + 1, opts.rounds);
    }
    const base = sides[0] as Side;
    return {
      machine: { cpus: cpus().length, node: process.version },
      settings: {
        writes: opts.writes,
        rounds: opts.rounds,
        concurrency: opts.concurrency,
        coldWrites: opts.coldWrites,
        fsync: (settings.rows[0] as { fsync: string }).fsync,
        synchronousCommit: (settings.rows[0] as { sc: string }).sc,
      },
      sides: sides.map((side) => ({
        name: side.name,
        servers: side.servers,
        perSecond: side.rates.map(Math.round),
        median: Math.round(median(side.rates)),
        ratio: Number(median(side.rates.map((r, i) => r / (base.rates[i] as number))).toFixed(3)),
        p50Ms: ms(percentile(side.latencies, 50)),
        p99Ms: ms(percentile(side.latencies, 99)),
        cold: {
          writes: side.cold.length,
          p50Ms: ms(percentile(side.cold, 50)),
          p99Ms: ms(percentile(side.cold, 99)),
        },
      })),
    };
  } finally {
    await Promise.all(routers.map((r) => r.close().catch(() => {})));
    await pool?.end().catch(() => {});
    await Promise.all(servers.map((s) => s.stop()));
  }
}

import { cpus } from 'node:os';
import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import type pg from 'pg';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { createPool } from 'shardflake/internal/postgres/connect.js';
import { installGenerator } from 'shardflake/internal/postgres/install.js';
import type { ReportSection } from './report.js';
import { median, percentile, seededRandom, shuffle } from './stats.js';

/**
 * D3: the id services the seeds weigh against in-database generation, measured side by side in one run.
 * - Flickr-style ticket servers: two servers, one sequence each (odd / even: START 1 or 2, INCREMENT 2), clients
 *   alternate between them; one extra round trip per id.
 * - Central range allocation: one counter row hands out blocks of `rangeSize` ids (`UPDATE … RETURNING`); each
 *   client spends its block locally, so one round trip per `rangeSize` ids, but a crash loses the rest of a block.
 * - next_id() in the data server: the id is made by the INSERT itself (column DEFAULT), no extra round trip.
 * Three embedded servers: `data` holds the tables (and next_id()), `ticket1` and `ticket2` the ticket sequences;
 * the range counter lives on `ticket1`.
 */

export const TICKET_METHODS = [
  'ticket servers (odd/even)',
  'range allocation',
  'next_id() in the database',
] as const;
export type TicketMethod = (typeof TICKET_METHODS)[number];

export interface TicketBenchOptions {
  /** Ids per method and round (default 5000). */
  ids?: number;
  rounds?: number;
  /** Clients asking at once (default 4). */
  concurrency?: number;
  /** Ids per block from the central counter (default 1000). */
  rangeSize?: number;
  seed?: number;
  signal?: AbortSignal;
  onProgress?: (done: number, total: number) => void;
}

export interface TicketMethodResult {
  method: TicketMethod;
  /** Ids obtained per second, nothing inserted (median of rounds). */
  idsPerSecond: number;
  /** Rows inserted per second with an id from this method (median of rounds). */
  rowsPerSecond: number;
  /** Round trips spent on getting ids, per id (the insert's own trip not counted). */
  roundTripsPerId: number;
  /** Latency of one "get an id and insert the row", in µs. */
  insertP50Us: number;
  insertP99Us: number;
  /** Ids seen twice across the whole run (must be 0). */
  duplicates: number;
}

export interface TicketBenchResult {
  ids: number;
  rounds: number;
  concurrency: number;
  rangeSize: number;
  methods: TicketMethodResult[];
  notes: string[];
  machine: { cpus: number; node: string };
  interrupted: boolean;
}

const DEFAULTS = { ids: 5000, rounds: 3, concurrency: 4, rangeSize: 1000, seed: 1 } as const;

/** How one method gets an id for one client. */
interface IdSource {
  /** Returns the next id, and whether it cost a round trip. */
  next(client: number): Promise<bigint>;
  trips: number;
}

/** Runs `count` tasks on `concurrency` workers; returns the elapsed seconds. */
async function drive(
  count: number,
  concurrency: number,
  task: (worker: number) => Promise<void>,
): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      while (next < count) {
        next++;
        await task(worker);
      }
    }),
  );
  return (performance.now() - started) / 1000;
}

function positive(value: number, what: string): number {
  if (!Number.isInteger(value) || value < 1) {
    throw new ShardflakeError('INVALID_ARGUMENT', `${what} must be a positive integer, got ${value}`);
  }
  return value;
}

export async function runTicketBench(options: TicketBenchOptions = {}): Promise<TicketBenchResult> {
  const ids = positive(options.ids ?? DEFAULTS.ids, '--ids');
  const rounds = positive(options.rounds ?? DEFAULTS.rounds, '--rounds');
  const concurrency = positive(options.concurrency ?? DEFAULTS.concurrency, '--concurrency');
  const rangeSize = positive(options.rangeSize ?? DEFAULTS.rangeSize, '--range');
  const random = seededRandom(options.seed ?? DEFAULTS.seed);
  let servers: EmbeddedServer[] = [];
  const pools: pg.Pool[] = [];
  try {
    servers = await startEmbeddedServers(3);
    const [data, ticket1, ticket2] = servers.map((s) => {
      const pool = createPool(s.url, { max: concurrency, applicationName: 'shardflake bench tickets' });
      pools.push(pool);
      return pool;
    }) as [pg.Pool, pg.Pool, pg.Pool];

    // Flickr's ticket servers used MySQL REPLACE INTO + LAST_INSERT_ID(); a Postgres sequence is the same service.
    await ticket1.query('CREATE SEQUENCE tickets START 1 INCREMENT 2');
    await ticket2.query('CREATE SEQUENCE tickets START 2 INCREMENT 2');
    await ticket1.query('CREATE TABLE id_range (next bigint NOT NULL)');
    await ticket1.query('INSERT INTO id_range VALUES (1)');
    const client = await data.connect();
    try {
      await installGenerator(client, { schema: 'bench_ids', shard: 1 });
    } finally {
      client.release();
    }
    const tables = { ticket: 't_ticket', range: 't_range', nextId: 't_next_id' } as const;
    await data.query(`CREATE TABLE ${tables.ticket} (id bigint PRIMARY KEY, n int NOT NULL)`);
    await data.query(`CREATE TABLE ${tables.range} (id bigint PRIMARY KEY, n int NOT NULL)`);
    await data.query(
      `CREATE TABLE ${tables.nextId} (id bigint PRIMARY KEY DEFAULT bench_ids.next_id(), n int NOT NULL)`,
    );

    let turn = 0;
    const ticketSource: IdSource = {
      trips: 0,
      async next() {
        this.trips++;
        const pool = turn++ % 2 === 0 ? ticket1 : ticket2;
        const { rows } = await pool.query<{ id: bigint }>("SELECT nextval('tickets') AS id");
        return (rows[0] as { id: bigint }).id;
      },
    };
    const blocks = Array.from({ length: concurrency }, () => ({ next: 0n, end: 0n }));
    const rangeSource: IdSource = {
      trips: 0,
      async next(worker) {
        const block = blocks[worker] as { next: bigint; end: bigint };
        if (block.next >= block.end) {
          this.trips++;
          const { rows } = await ticket1.query<{ start: bigint }>(
            'UPDATE id_range SET next = next + $1 RETURNING next - $1 AS start',
            [rangeSize],
          );
          block.next = (rows[0] as { start: bigint }).start;
          block.end = block.next + BigInt(rangeSize);
        }
        return block.next++;
      },
    };
    const nextIdSource: IdSource = {
      trips: 0,
      async next() {
        this.trips++;
        const { rows } = await data.query<{ id: bigint }>('SELECT bench_ids.next_id() AS id');
        return (rows[0] as { id: bigint }).id;
      },
    };

    const state = TICKET_METHODS.map((method) => ({
      method,
      source:
        method === 'ticket servers (odd/even)'
          ? ticketSource
          : method === 'range allocation'
            ? rangeSource
            : nextIdSource,
      seen: new Set<bigint>(),
      duplicates: 0,
      idRates: [] as number[],
      rowRates: [] as number[],
      latencies: [] as number[],
      idsTaken: 0,
      tripsForIds: 0,
    }));
    const remember = (s: (typeof state)[number], id: bigint) => {
      if (s.seen.has(id)) s.duplicates++;
      else s.seen.add(id);
    };
    let n = 0;
    const total = rounds * state.length;
    let done = 0;
    let interrupted = false;
    for (let round = 0; round < rounds && !interrupted; round++) {
      const order = shuffle(state, random);
      for (const s of order) {
        if (options.signal?.aborted) {
          interrupted = true;
          break;
        }
        // 1. ids alone.
        const tripsBefore = s.source.trips;
        const idSeconds = await drive(ids, concurrency, async (worker) =>
          remember(s, await s.source.next(worker)),
        );
        s.idRates.push(ids / idSeconds);
        s.idsTaken += ids;
        s.tripsForIds += s.source.trips - tripsBefore;
        // 2. get an id and insert the row with it (next_id(): the INSERT makes it).
        const rowSeconds = await drive(ids, concurrency, async (worker) => {
          const started = performance.now();
          if (s.method === 'next_id() in the database') {
            const { rows } = await data.query<{ id: bigint }>(
              `INSERT INTO ${tables.nextId} (n) VALUES ($1) RETURNING id`,
              [n++],
            );
            remember(s, (rows[0] as { id: bigint }).id);
          } else {
            const id = await s.source.next(worker);
            remember(s, id);
            const table = s.method === 'range allocation' ? tables.range : tables.ticket;
            await data.query(`INSERT INTO ${table} (id, n) VALUES ($1, $2)`, [id, n++]);
          }
          s.latencies.push((performance.now() - started) * 1000);
        });
        s.rowRates.push(ids / rowSeconds);
        options.onProgress?.(++done, total);
      }
    }
    const methods: TicketMethodResult[] = state
      .filter((s) => s.idRates.length > 0)
      .map((s) => ({
        method: s.method,
        idsPerSecond: Math.round(median(s.idRates)),
        rowsPerSecond: Math.round(median(s.rowRates)),
        roundTripsPerId: Number(
          (s.method === 'next_id() in the database' ? 0 : s.tripsForIds / s.idsTaken).toFixed(4),
        ),
        insertP50Us: Math.round(percentile(s.latencies, 50)),
        insertP99Us: Math.round(percentile(s.latencies, 99)),
        duplicates: s.duplicates,
      }));
    return {
      ids,
      rounds,
      concurrency,
      rangeSize,
      methods,
      notes: [
        'next_id() costs no round trip of its own: the INSERT makes the id (its ids/s figure is SELECT next_id(), shown for comparison only).',
        'Ticket ids from two servers interleave but do not sort by time across servers; a dead ticket server halves capacity until clients skip it.',
        `Range allocation loses the unused part of a block (up to ${rangeSize} ids) when a client stops, and its ids sort by block, not by time.`,
        'All servers are local embedded PostgreSQL on loopback; across a network every extra round trip costs more.',
      ],
      machine: { cpus: cpus().length, node: process.version },
      interrupted,
    };
  } finally {
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await Promise.all(servers.map((s) => s.stop()));
  }
}

/** The result as a report section (table + rows/s bars). */
export function ticketSection(result: TicketBenchResult): ReportSection {
  return {
    title: 'Id services (D3): ticket servers and range allocation vs next_id()',
    description: result.notes.join(' '),
    result,
    bars: {
      title: 'rows inserted per second with an id from each method',
      unit: 'rows/s',
      values: result.methods.map((m) => ({ label: m.method, value: m.rowsPerSecond })),
    },
  };
}

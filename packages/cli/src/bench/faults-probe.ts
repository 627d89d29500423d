import type pg from 'pg';
import { connect } from 'shardflake/internal/postgres/connect.js';
import { qualified } from 'shardflake/internal/postgres/identifier.js';

/**
 * Which copies of each shard take writes, checked on every node at once (bench faults): the count of shards
 * writable on two nodes at any check is the first figure a fault scenario must keep at zero.
 *
 * A check opens a transaction on every node in turn and, in each, tries an insert into every shard schema the
 * node holds (a savepoint per schema, lock_timeout 100 ms: a copy locked by a cutover counts as not writable at
 * that moment). A successful insert is kept, uncommitted, until every node has been tried, and then all are rolled
 * back. Holding it is what makes "writable on two nodes" mean at the same moment: the insert's lock keeps a fence
 * (CREATE TRIGGER) off that copy until the check ends, so a shard found writable on node x and then on node y was
 * writable on both while y was tried. A node that does not answer (killed) is left out of that check.
 */
export interface DoubleWritable {
  shard: number;
  nodes: string[];
}

export interface Probes {
  /** Runs one check now (also run every `everyMs` in the background). */
  check(): Promise<void>;
  stop(): Promise<{ checks: number; doubleWritable: DoubleWritable[] }>;
}

export function startProbes(
  nodes: () => Record<string, string>,
  schemaPrefix: string,
  everyMs = 250,
): Probes {
  const clients = new Map<string, pg.Client>();
  const found = new Map<number, Set<string>>();
  let checks = 0;
  let running: Promise<void> = Promise.resolve();
  let stopped = false;

  async function client(name: string, url: string): Promise<pg.Client | null> {
    const known = clients.get(name);
    if (known) return known;
    try {
      const c = await connect(url, {
        connectTimeoutMs: 1000,
        applicationName: 'shardflake bench faults probe',
      });
      c.on('error', () => clients.delete(name));
      clients.set(name, c);
      return c;
    } catch {
      return null;
    }
  }

  async function checkOnce(): Promise<void> {
    const open: pg.Client[] = [];
    const writable = new Map<number, string[]>();
    try {
      for (const [name, url] of Object.entries(nodes())) {
        const c = await client(name, url);
        if (!c) continue;
        try {
          await c.query("BEGIN; SET LOCAL lock_timeout = '100ms'; SET LOCAL statement_timeout = '1s'");
          open.push(c);
          const { rows } = await c.query(
            `SELECT nspname::text AS schema FROM pg_namespace WHERE nspname ~ ('^' || $1 || '[0-9]{4}$') ORDER BY 1`,
            [schemaPrefix],
          );
          for (const { schema } of rows as { schema: string }[]) {
            await c.query('SAVEPOINT probe');
            try {
              await c.query(`INSERT INTO ${qualified(schema, 'items')} (note) VALUES ('probe')`);
              await c.query('RELEASE SAVEPOINT probe');
              const shard = Number(schema.slice(schemaPrefix.length));
              writable.set(shard, [...(writable.get(shard) ?? []), name]);
            } catch {
              await c.query('ROLLBACK TO SAVEPOINT probe');
            }
          }
        } catch {
          // the node went away during the check: leave it out
          clients.delete(name);
          await c.end().catch(() => {});
        }
      }
    } finally {
      await Promise.all(open.map((c) => c.query('ROLLBACK').catch(() => {})));
    }
    checks++;
    for (const [shard, on] of writable) {
      if (on.length < 2) continue;
      const seen = found.get(shard) ?? new Set<string>();
      for (const n of on) seen.add(n);
      found.set(shard, seen);
    }
  }

  const check = () => {
    running = running.then(checkOnce, checkOnce);
    return running;
  };
  let busy = false;
  const timer = setInterval(() => {
    if (stopped || busy) return;
    busy = true;
    void check().finally(() => {
      busy = false;
    });
  }, everyMs);

  return {
    check,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running.catch(() => {});
      await Promise.all([...clients.values()].map((c) => c.end().catch(() => {})));
      return {
        checks,
        doubleWritable: [...found].map(([shard, on]) => ({ shard, nodes: [...on].sort() })),
      };
    },
  };
}

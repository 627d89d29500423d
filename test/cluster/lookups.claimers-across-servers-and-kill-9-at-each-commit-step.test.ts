import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { shardForKey } from '../../packages/shardflake/src/routing/shard-key.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';

/**
 * Two servers (shards 0–1 on a, 2–3 on b). The claimers' rows and the value's entry live on different servers, so
 * every claim is a two-phase commit whose last agent is the row's server and whose prepared participant holds the
 * entry. Proven here:
 * - two claimers on two servers, the first held after writing its entry: the second waits on the first one's
 *   transaction and exactly one commits (either way the first one ends);
 * - a claimer killed with SIGKILL at each step of its commit: before PREPARE, after PREPARE (no decision), after
 *   the decision. While its prepared entry is in doubt a second claimer waits rather than getting in; after
 *   recovery the value is free (first two) or owned by the killed claimer's committed row (the last), never both.
 */
const [a, b] = await useServers(2);
const rawConfig = {
  servers: { a: defined(a).url, b: defined(b).url },
  catalog: 'a',
  logicalShards: 4,
  epoch: '2024-01-01T00:00:00Z',
  tables: {
    users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), name text NOT NULL, email text)',
  },
  lookups: { user_email: { table: 'users', column: 'email', unique: true } },
};
const config = validateConfig(rawConfig, 'test-config');
let router: Router;
const admin: Record<'a' | 'b', pg.Client> = {} as Record<'a' | 'b', pg.Client>;

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false, inDoubtAfterMs: 300 } });
  admin.a = await connect(defined(a).url);
  admin.b = await connect(defined(b).url);
});
after(async () => {
  await router?.close();
  await admin.a?.end();
  await admin.b?.end();
});

/** A fresh value whose entry lives on server `server` (shards 0–1 are a's, 2–3 b's). */
let counter = 0;
function valueOn(server: 'a' | 'b', tag: string): string {
  for (;;) {
    const value = `${tag}-${++counter}@x`;
    if ((shardForKey(value, 4) < 2 ? 'a' : 'b') === server) return value;
  }
}

async function owners(value: string): Promise<string[]> {
  const found: string[] = [];
  for (const [server, client] of Object.entries(admin)) {
    const shards = server === 'a' ? [0, 1] : [2, 3];
    for (const s of shards) {
      const { rows } = await client.query(
        `SELECT name FROM "${shardSchema(config, s)}".users WHERE email = $1`,
        [value],
      );
      found.push(...rows.map((r: { name: string }) => r.name));
    }
  }
  return found.sort();
}

async function waitingOn(client: pg.Client, locktype: string): Promise<number> {
  const { rows } = await client.query(
    'SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = $1',
    [locktype],
  );
  return rows[0].n;
}

async function until(check: () => Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

function settle<T>(p: Promise<T>): Promise<{ ok: T } | { error: unknown }> {
  return p.then(
    (ok) => ({ ok }),
    (error: unknown) => ({ error }),
  );
}

/** Starts the claimer process; resolves once it reports it stopped at `step`. */
async function claimerAt(key: number, value: string, step: string): Promise<ChildProcess> {
  const script = fileURLToPath(new URL('../support/lookup-claimer.js', import.meta.url));
  const child = spawn(process.execPath, [script, JSON.stringify(rawConfig), String(key), value, step], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout?.setEncoding('utf8');
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on('data', (chunk: string) => {
      out += chunk;
      if (out.includes(`at ${step}`)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`claimer exited (${code}) before ${step}: ${out}`)));
  });
  return child;
}

describe('unique lookup across two servers', () => {
  it('two claimers whose rows are on different servers: the second waits for the first, exactly one commits', async () => {
    for (const firstCommits of [true, false]) {
      const value = valueOn('b', firstCommits ? 'race' : 'race-fail');
      const entrySchema = shardSchema(config, shardForKey(value, 4));
      // Held point: the first claimer's entry is written (on b), its transaction not yet prepared.
      await admin.b.query(`CREATE OR REPLACE FUNCTION "${entrySchema}".hold() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.value = '${value}' AND current_setting('application_name') <> 'second' THEN
            PERFORM pg_advisory_xact_lock(77);
            IF NEW.value LIKE 'race-fail%' THEN RAISE EXCEPTION 'first claimer fails after its entry'; END IF;
          END IF;
          RETURN NULL;
        END $$`);
      await admin.b.query(
        `CREATE OR REPLACE TRIGGER hold AFTER INSERT ON "${entrySchema}"._shardflake_lookup_user_email FOR EACH ROW EXECUTE FUNCTION "${entrySchema}".hold()`,
      );
      await admin.b.query('SELECT pg_advisory_lock(77)');
      const first = settle(router.insert('users', { name: 'first', email: value }, { key: 0 }));
      await until(async () => (await waitingOn(admin.b, 'advisory')) === 1);
      const second = settle(
        router.withShards([{ shard: 2 }, { shard: shardForKey(value, 4) }], async ([row, entry]) => {
          // The entry shard's session marks this claimer as "second" for the hold trigger (shared connection).
          await entry?.query("SET LOCAL application_name = 'second'");
          await row?.query("INSERT INTO users (name, email) VALUES ('second', $1)", [value]);
        }),
      );
      await until(async () => (await waitingOn(admin.b, 'transactionid')) === 1);
      await admin.b.query('SELECT pg_advisory_unlock(77)');
      const [x, y] = await Promise.all([first, second]);
      if (firstCommits) {
        assert.ok('ok' in x, 'the first claimer commits');
        assert.ok(
          'error' in y && isShardflakeError(y.error, 'UNIQUE_VIOLATION'),
          'the second one is refused',
        );
        assert.deepEqual(await owners(value), ['first']);
      } else {
        assert.ok('error' in x, 'the first claimer fails after writing its entry');
        assert.ok('ok' in y, 'so the second one commits');
        assert.deepEqual(await owners(value), ['second']);
      }
      await admin.b.query(`DROP TRIGGER hold ON "${entrySchema}"._shardflake_lookup_user_email`);
    }
  });

  it('two claims crossing servers through pools of one connection: the entry participants come from the commit pools, neither waits forever', async () => {
    // Each claim holds its row server's only connection (both are held at once: a barrier in the callbacks) and
    // then needs one on the other server for its entry. From the same pools each would wait for the other's.
    const small = await createRouter(config, { poolSize: 1, transactions: { recovery: false } });
    try {
      let arrived = 0;
      let release: () => void = () => {};
      const barrier = new Promise<void>((resolve) => {
        release = resolve;
      });
      const claim = (key: number, value: string) =>
        small.withShard({ key }, async (session) => {
          await session.query("INSERT INTO users (name, email) VALUES ('crossed', $1)", [value]);
          if (++arrived === 2) release();
          await barrier;
        });
      const settled = await Promise.allSettled([
        claim(0, valueOn('b', 'crossed')),
        claim(2, valueOn('a', 'crossed')),
      ]);
      assert.deepEqual(
        settled
          .filter((r) => r.status === 'rejected')
          .map((r) => String((r as PromiseRejectedResult).reason)),
        [],
      );
    } finally {
      await small.close();
    }
  });

  for (const [step, outcome] of [
    ['prepare:start', 'free'],
    ['decide:start', 'free'],
    ['decide:done', 'owned'],
  ] as const) {
    it(`a claimer killed -9 at ${step}: after recovery the value is ${outcome === 'free' ? 'free' : 'owned by its committed row'}, never twice`, async () => {
      const value = valueOn('b', step.replace(':', '-'));
      const child = await claimerAt(0, value, step);
      child.kill('SIGKILL');
      await once(child, 'exit');
      const { rows } = await admin.b.query('SELECT count(*)::int AS n FROM pg_prepared_xacts');
      assert.equal(
        rows[0].n,
        step === 'prepare:start' ? 0 : 1,
        'the entry participant is prepared after PREPARE',
      );
      // A second claimer (row on a, entry on b) meanwhile: not let in while the killed one's entry is in doubt.
      const second = settle(router.insert('users', { name: 'second', email: value }, { key: 1 }));
      if (step !== 'prepare:start') {
        await until(async () => (await waitingOn(admin.b, 'transactionid')) === 1);
        await new Promise((r) => setTimeout(r, 400)); // older than the in-doubt grace (300 ms)
        const report = await router.recoverTransactions();
        assert.equal(report[outcome === 'free' ? 'rolledBack' : 'committed'].length, 1);
      }
      const result = await second;
      if (outcome === 'free') {
        assert.ok('ok' in result, `the value was free: ${'error' in result ? String(result.error) : ''}`);
        assert.deepEqual(await owners(value), ['second']);
      } else {
        assert.ok('error' in result && isShardflakeError(result.error, 'UNIQUE_VIOLATION'));
        assert.deepEqual(await owners(value), ['claimer']);
      }
      const hit = await router.lookup('user_email', value);
      assert.equal(hit?.shard, outcome === 'free' ? 1 : 0);
      const left = await admin.b.query('SELECT count(*)::int AS n FROM pg_prepared_xacts');
      assert.equal(left.rows[0].n, 0, 'nothing left in doubt');
    });
  }
});

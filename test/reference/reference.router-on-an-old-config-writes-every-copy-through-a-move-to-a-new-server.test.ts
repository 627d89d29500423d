import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router } from 'shardflake';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { readReferenceCopies } from '../../packages/shardflake/src/catalog/reference-copies.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { moveShard } from '../../packages/shardflake/src/move/move.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { checkReferenceTables } from '../../packages/shardflake/src/reference/verify.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';

/**
 * Reference writes reach every server that holds a copy, whatever config the router started with (issue 29's
 * second hole: a router on the config it started with kept writing a and b only after a move filled c's copy).
 *
 * The cluster is made on a and b; c, d and e are added by moves, each with a config that names them, while the
 * routers keep the config they started with (a, b) and log in to the new servers with a password file. Writers
 * touch two reference tables in both orders (the issue's fill once failed with "deadlock detected" against such
 * writers). The two interleavings of a fill and a writer are provoked exactly (write.ts, copy.ts: the argument);
 * drift is caught by comparing contents, where the row counts agree.
 */
const servers = (await useServers(5)) as EmbeddedServer[];
const [a, b, c, d, e] = servers as [
  EmbeddedServer,
  EmbeddedServer,
  EmbeddedServer,
  EmbeddedServer,
  EmbeddedServer,
];
const raw = (names: EmbeddedServer[]) => ({
  servers: Object.fromEntries(names.map((s) => [s.name, s.url])),
  catalog: 'a',
  logicalShards: 8,
  epoch: '2024-01-01T00:00:00Z',
  tables: { items: 'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text)' },
  referenceTables: {
    plans: 'CREATE TABLE plans (token text PRIMARY KEY, n int NOT NULL)',
    features: 'CREATE TABLE features (token text PRIMARY KEY, flag text NOT NULL)',
  },
});
const oldConfig = validateConfig(raw([a, b]), 'old-config');
const fullConfig = validateConfig(raw(servers), 'full-config');
const dir = await mkdtemp(join(tmpdir(), 'shardflake-ref-move-'));
const fullFile = join(dir, 'full.json');
// The routers' environment gives the new servers' passwords (the catalog keeps addresses, never passwords).
const passFile = join(dir, 'pgpass');
let router: Router;

before(async () => {
  await writeFile(fullFile, JSON.stringify(raw(servers)), { mode: 0o600 });
  const line = (s: EmbeddedServer) => `127.0.0.1:${s.port}:*:postgres:${new URL(s.url).password}`;
  await writeFile(passFile, `${[c, d, e].map(line).join('\n')}\n`, {
    mode: 0o600,
  });
  process.env.PGPASSFILE = passFile;
  await initCluster(oldConfig);
  router = await createRouter(oldConfig, { poolSize: 6, transactions: { recovery: false } });
});
after(async () => {
  await router?.close();
  delete process.env.PGPASSFILE;
  await rm(dir, { recursive: true, force: true });
});

async function onServer<T>(
  s: EmbeddedServer,
  fn: (client: Awaited<ReturnType<typeof connect>>) => Promise<T>,
) {
  const client = await connect(s.url);
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** A server's copy of both tables, as sorted text. */
const copyOf = (s: EmbeddedServer) =>
  onServer(s, async (client) => {
    const { rows } = await client.query(
      `SELECT (SELECT coalesce(string_agg(token || ':' || n, ',' ORDER BY token), '') FROM shardflake_reference.plans) AS plans,
              (SELECT coalesce(string_agg(token || ':' || flag, ',' ORDER BY token), '') FROM shardflake_reference.features) AS features`,
    );
    return rows[0] as { plans: string; features: string };
  });

/** Whether a backend on `s` waits for a lock on the reference relation `relation`. */
const waitsOn = (s: EmbeddedServer, relation: string) =>
  onServer(s, async (client) => {
    const { rows } = await client.query(
      `SELECT 1 FROM pg_locks WHERE NOT granted AND relation = to_regclass($1)`,
      [`shardflake_reference.${relation}`],
    );
    return rows.length > 0;
  });

async function until(check: () => Promise<boolean>, what: string, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A write of one token into both tables, in the order `flip` picks. */
const writeToken = (r: Router, token: string, flip: boolean) =>
  r.withReference(async (s) => {
    const plans = () => s.query('INSERT INTO plans VALUES ($1, 1)', [token]);
    const features = () => s.query("INSERT INTO features VALUES ($1, 'on')", [token]);
    if (flip) {
      await features();
      await plans();
    } else {
      await plans();
      await features();
    }
    return s.servers;
  });

describe('a router on its old config (a, b) writing reference tables through moves to new servers', () => {
  it('through `cluster move --shard 0 --to c`: nothing lost, every copy identical, and a shard session on c reads the new rows', async () => {
    const acknowledged: string[] = [];
    const failures: unknown[] = [];
    let wroteC = 0;
    let stop = false;
    const writers = [0, 1, 2, 3].map(async (w) => {
      for (let n = 0; !stop; n++) {
        const token = `w${w}-${n}`;
        try {
          const written = await writeToken(router, token, (w + n) % 2 === 1);
          acknowledged.push(token);
          if (written.includes('c')) wroteC++;
        } catch (error) {
          failures.push(error);
        }
      }
    });
    while (acknowledged.length < 20) await new Promise((r) => setTimeout(r, 10));
    const move = await startCli(['cluster', 'move', '--config', fullFile, '--shard', '0', '--to', 'c']).done;
    assert.equal(move.code, 0, move.stderr);
    assert.equal(router.placement(0).server, 'c');
    const atMove = acknowledged.length;
    while (wroteC < 20) await new Promise((r) => setTimeout(r, 10));
    stop = true;
    await Promise.all(writers);
    assert.deepEqual(failures.map(String), [], 'no write failed (no deadlock, no drift)');
    assert.ok(acknowledged.length > atMove, 'writes went on after the move');

    const [onA, onB, onC] = [await copyOf(a), await copyOf(b), await copyOf(c)];
    assert.deepEqual(onB, onA);
    assert.deepEqual(onC, onA, 'c holds every row a holds');
    const held = new Set(onA.plans.split(',').map((p) => p.split(':')[0]));
    const lost = acknowledged.filter((t) => !held.has(t));
    assert.deepEqual(lost, [], 'every acknowledged write is on every copy');
    // d and e have no copy yet: the check runs with the servers that do.
    assert.deepEqual(await checkReferenceTables(validateConfig(raw([a, b, c]), 'abc')), []);
    assert.deepEqual(await onServer(a, (cl) => readReferenceCopies(cl)), ['a', 'b', 'c']);

    // The old router's shard session on c reads the rows written after the move.
    const last = acknowledged.at(-1) as string;
    const seen = await router.withShard({ shard: 0 }, async (s) => {
      assert.equal(s.server, 'c');
      return (await s.query('SELECT count(*)::int AS n FROM plans WHERE token = $1', [last])).rows[0]?.n;
    });
    assert.equal(seen, 1);
  });

  it('a writer whose marks came before the fill: the fill waits for it, and the new copy holds its rows', async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const writer = router.withReference(async (s) => {
      await s.query("INSERT INTO plans VALUES ('before-fill', 2)");
      await gate;
      return s.servers;
    });
    // The writer holds its marks on a, b and c; the move to d starts and its fill waits for the writer on a.
    await until(
      async () => (await copyOf(a)).plans.includes('before-fill') === false && (await writerHolds(a)),
      'the writer to hold its marks',
    );
    const moving = moveShard(fullConfig, 1, 'd');
    await until(() => waitsOn(a, '_shardflake_writers'), 'the fill to wait for the writer on a');
    release();
    assert.deepEqual(await writer, ['a', 'b', 'c']);
    await moving;
    const onD = await copyOf(d);
    assert.match(onD.plans, /before-fill:2/);
    assert.deepEqual(onD, await copyOf(a));
  });

  it('a writer that starts on the old list while the fill holds the writers: it learns the new copy from its mark and writes it, running fn once', async () => {
    // The fill gets the writers lock on a, then waits for a's tables, which a plain transaction holds.
    const holder = await connect(a.url);
    await holder.query('BEGIN; LOCK shardflake_reference.plans IN ROW EXCLUSIVE MODE');
    const moving = moveShard(fullConfig, 2, 'e');
    try {
      await until(() => waitsOn(a, 'plans'), 'the fill to wait for the tables on a');
      let calls = 0;
      const writer = router.withReference(async (s) => {
        calls++;
        await s.query("INSERT INTO plans VALUES ('during-fill', 3)");
        return s.servers;
      });
      // Its map lists a, b, c, d: its mark on a waits behind the fill.
      await until(() => waitsOn(a, '_shardflake_writers'), 'the writer to wait for its mark on a');
      await holder.query('COMMIT');
      assert.deepEqual(await writer, ['a', 'b', 'c', 'd', 'e']);
      assert.equal(calls, 1, 'fn ran once: the writer started again before it');
      await moving;
    } finally {
      await holder.end();
    }
    const onE = await copyOf(e);
    assert.match(onE.plans, /during-fill:3/);
    for (const s of [b, c, d]) assert.deepEqual(await copyOf(s), onE, `copy on ${s.name}`);
  });

  it('a copy that already differs is caught by its contents even when every statement changes as many rows, and nothing commits', async () => {
    // Server c gets a row the others lack (a superuser writing around the guard): the drift issue 29 saw on c.
    await onServer(c, (client) =>
      client.query(`BEGIN; SELECT shardflake_reference._shardflake_begin_write();
                    INSERT INTO shardflake_reference.plans VALUES ('stray', 9); COMMIT`),
    );
    const before = await copyOf(a);
    await assert.rejects(writeToken(router, 'after-drift', false), (error: unknown) => {
      assert.ok(isShardflakeError(error, 'REFERENCE_DRIFT'), String(error));
      assert.match(error.message, /table plans holds \d+ rows .* on server a and \d+ rows .* on server c/);
      return true;
    });
    assert.deepEqual(await copyOf(a), before);
    assert.doesNotMatch((await copyOf(e)).plans, /after-drift/);
    const problems = await checkReferenceTables(fullConfig);
    assert.ok(
      problems.some((p) => p.server === 'c' && p.table === 'plans'),
      JSON.stringify(problems),
    );
    // A statement that is not deterministic would make the copies differ: it is refused before it runs anywhere.
    await onServer(c, (client) =>
      client.query(`BEGIN; SELECT shardflake_reference._shardflake_begin_write();
                    DELETE FROM shardflake_reference.plans WHERE token = 'stray'; COMMIT`),
    );
    await assert.rejects(
      router.withReference((s) =>
        s.query("INSERT INTO plans VALUES ('clock', extract(microseconds FROM clock_timestamp())::int)"),
      ),
      (error: unknown) => isShardflakeError(error, 'REFERENCE_NOT_DETERMINISTIC'),
    );
    await writeToken(router, 'after-repair', true);
    assert.deepEqual(await checkReferenceTables(fullConfig), []);
  });

  it('a router that cannot log in to a server holding a copy fails in one typed line and writes no copy', async () => {
    delete process.env.PGPASSFILE;
    const blind = await createRouter(oldConfig, { transactions: { recovery: false } });
    try {
      const before = await copyOf(a);
      await assert.rejects(writeToken(blind, 'blind', false), (error: unknown) => {
        assert.ok(isShardflakeError(error, 'AUTH_FAILED'), String(error));
        assert.match(error.message, /server c .* refused the login/);
        return true;
      });
      for (const s of servers) assert.deepEqual(await copyOf(s), before, `copy on ${s.name}`);
    } finally {
      await blind.close();
      process.env.PGPASSFILE = passFile;
    }
  });
});

/** Whether a transaction on `s` holds a reference write's mark (a ROW EXCLUSIVE lock on the writers table). */
const writerHolds = (s: EmbeddedServer) =>
  onServer(s, async (client) => {
    const { rows } = await client.query(
      `SELECT 1 FROM pg_locks WHERE granted AND mode = 'RowExclusiveLock'
         AND relation = to_regclass('shardflake_reference._shardflake_writers')`,
    );
    return rows.length > 0;
  });

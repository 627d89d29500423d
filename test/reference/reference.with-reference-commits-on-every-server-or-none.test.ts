import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router, type RouterEvent } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';

const servers = await useServers(2);
const config = testConfig(servers, {
  logicalShards: 2,
  referenceTables: {
    plans: 'CREATE TABLE plans (id int PRIMARY KEY, name text NOT NULL, hits int NOT NULL DEFAULT 0)',
  },
});
let router: Router;
const events: RouterEvent[] = [];

async function onServer<T>(
  i: number,
  fn: (c: Awaited<ReturnType<typeof connect>>) => Promise<T>,
): Promise<T> {
  const c = await connect(servers[i]?.url as string);
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}
const planRows = (i: number) =>
  onServer(
    i,
    async (c) => (await c.query('SELECT id, name, hits FROM shardflake_reference.plans ORDER BY id')).rows,
  );
const bothCopies = async () => [await planRows(0), await planRows(1)];

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 4, onEvent: (e) => events.push(e) });
});
after(async () => {
  await router?.close();
});

describe('router.withReference', () => {
  it('writes every copy, returns the first server result, and shard sessions on both servers see the rows', async () => {
    const result = await router.withReference(async (s) => {
      assert.deepEqual(s.servers, ['a', 'b']);
      await s.query('INSERT INTO plans (id, name) VALUES ($1, $2), ($3, $4)', [1, 'free', 2, 'pro']);
      return (await s.query<{ n: number }>('SELECT count(*)::int AS n FROM plans')).rows[0]?.n;
    });
    assert.equal(result, 2);
    // One transaction across the servers: b prepared, a's commit the decision (the last agent), b committed.
    const steps = events.flatMap((e) =>
      e.type === 'transaction' && e.step === 'done' ? [`${e.phase}@${e.server}`] : [],
    );
    assert.deepEqual(steps, ['prepare@b', 'decide@a', 'commit-prepared@b']);
    assert.ok(events.some((e) => e.type === 'operation' && e.operation === 'withReference'));
    const [a, b] = await bothCopies();
    assert.deepEqual(a, b);
    assert.equal(a?.length, 2);
    for (const shard of [0, 1]) {
      const names = await router.withShard({ shard }, async (s) =>
        (await s.query('SELECT name FROM plans ORDER BY id')).rows.map((r) => r.name),
      );
      assert.deepEqual(names, ['free', 'pro'], `shard ${shard} on ${router.placement(shard).server}`);
    }
  });

  it('a statement failing on the second server after succeeding on the first commits nowhere, even if fn catches it', async () => {
    // Server b alone refuses one value (a trigger only there): the statement succeeds on a first, then fails on b.
    await onServer(1, (c) =>
      c.query(`CREATE FUNCTION public.no_boom() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN IF NEW.name = 'boom' THEN RAISE EXCEPTION 'no boom here'; END IF; RETURN NEW; END $$;
               CREATE TRIGGER no_boom BEFORE INSERT ON shardflake_reference.plans
                 FOR EACH ROW EXECUTE FUNCTION public.no_boom()`),
    );
    const before = await bothCopies();
    await assert.rejects(
      router.withReference(async (s) => {
        await s.query(`INSERT INTO plans (id, name) VALUES (3, 'team')`);
        await s.query(`INSERT INTO plans (id, name) VALUES (4, 'boom')`);
      }),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR') && /server b: .*no boom here/.test(e.message),
    );
    await assert.rejects(
      router.withReference(async (s) => {
        await s.query(`INSERT INTO plans (id, name) VALUES (3, 'team')`);
        await s.query(`INSERT INTO plans (id, name) VALUES (4, 'boom')`).catch(() => {});
        return 'fn went on';
      }),
      /no boom here/,
    );
    assert.deepEqual(await bothCopies(), before);
  });

  it('a server whose connection dies mid-write commits nowhere, and the next write goes through', async () => {
    const before = await bothCopies();
    await assert.rejects(
      router.withReference(async (s) => {
        await s.query(`INSERT INTO plans (id, name) VALUES (6, 'lost')`);
        // Server b's backend of this write goes away, as if its server had failed there.
        await onServer(1, (c) =>
          c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE application_name LIKE 'shardflake tx %' AND state LIKE 'idle in transaction%'`),
        );
        await s.query(`INSERT INTO plans (id, name) VALUES (7, 'lost too')`);
      }),
      (e: unknown) => isShardflakeError(e) && /server b/.test(e.message),
    );
    assert.deepEqual(await bothCopies(), before);
    await router.withReference((s) => s.query(`UPDATE plans SET hits = 0`));
    const [a, b] = await bothCopies();
    assert.deepEqual(a, b);
  });

  it('a failure at commit time on one server (a deferred constraint) commits nowhere', async () => {
    await onServer(1, (c) =>
      c.query(`CREATE FUNCTION public.no_late() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN IF NEW.name = 'late' THEN RAISE EXCEPTION 'refused at commit'; END IF; RETURN NULL; END $$;
               CREATE CONSTRAINT TRIGGER no_late AFTER INSERT ON shardflake_reference.plans
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.no_late()`),
    );
    const before = await bothCopies();
    await assert.rejects(
      router.withReference((s) => s.query(`INSERT INTO plans (id, name) VALUES (5, 'late')`)),
      /refused at commit/,
    );
    assert.deepEqual(await bothCopies(), before);
  });

  it('concurrent writers in opposite lock orders never hang across servers: each commits everywhere or is a deadlock found on the first server', async () => {
    const [start] = await bothCopies();
    // A connection per writer and server: with fewer, writers would queue behind deadlocks that PostgreSQL takes
    // deadlock_timeout (1 s) each to find, and the last could wait past the pool's wait (POOL_TIMEOUT).
    const wide = await createRouter(config, { poolSize: 12 });
    const settled = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) =>
        wide.withReference(async (s) => {
          // Two rows in opposite orders: a writer holding a row on one server while waiting for it on another
          // would hang forever (no server sees such a cycle); meeting on the first server, PostgreSQL breaks it.
          const ids = i % 2 === 0 ? [1, 2] : [2, 1];
          for (const id of ids) await s.query('UPDATE plans SET hits = hits + 1 WHERE id = $1', [id]);
        }),
      ),
    ).finally(() => wide.close());
    const failures = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    for (const f of failures) {
      assert.ok(isShardflakeError(f.reason) && f.reason.sqlState === '40P01', String(f.reason));
      assert.match(f.reason.message, /^server a: /);
    }
    const committed = settled.length - failures.length;
    assert.ok(committed > 0);
    const [a, b] = await bothCopies();
    assert.deepEqual(a, b);
    const hits = (row: Record<string, unknown> | undefined) => row?.hits as number;
    assert.equal(hits(a?.[0]) - hits(start?.[0]), committed);
    assert.equal(hits(a?.[1]) - hits(start?.[1]), committed);
  });

  it('a copy that differs already is found by the row count, and nothing commits', async () => {
    // Server b gets a row the others lack (as a superuser writing around the guard).
    await onServer(1, (c) =>
      c.query(`BEGIN; SELECT shardflake_reference._shardflake_begin_write();
               INSERT INTO shardflake_reference.plans (id, name) VALUES (9, 'drifted'); COMMIT`),
    );
    const before = await bothCopies();
    await assert.rejects(
      router.withReference((s) => s.query(`UPDATE plans SET name = upper(name) WHERE id >= 2`)),
      (e: unknown) => {
        assert.ok(isShardflakeError(e, 'REFERENCE_DRIFT'), String(e));
        assert.match(e.message, /1 rows on server a but 2 on server b/);
        return true;
      },
    );
    assert.deepEqual(await bothCopies(), before);
    await assert.rejects(
      router.withReference(async () => {}).then(() => router.withReference('nope' as never)),
      (e: unknown) => isShardflakeError(e, 'INVALID_ARGUMENT'),
    );
  });
});

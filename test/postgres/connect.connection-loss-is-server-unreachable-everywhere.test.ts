import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { createRouter, type Router, type RouterEvent, ShardflakeError } from 'shardflake';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { freePort } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect, isConnectionLoss, wrapPgError } from '../../packages/shardflake/src/postgres/connect.js';
import { isConnectionLost } from '../../packages/shardflake/src/routing/lease.js';
import { isNodeFailure } from '../../packages/shardflake/src/topology/node-errors.js';
import { startCli } from '../support/cli.js';
import { type CutProxy, startCutProxy } from '../support/cut-proxy.js';
import { useServers } from '../support/postgres.js';

/**
 * Connection loss is SERVER_UNREACHABLE, whatever broke it and wherever it is met: one mapping
 * (postgres/connect.ts `isConnectionLoss`, used by wrapPgError, the node checks and the commit's "was it lost?"),
 * proved here on errors real connections throw — a backend terminated by the server, a socket closed or reset
 * under a running statement (a proxy in front of server b cuts it), a port nothing listens on, a server stopped
 * in the middle of a statement — and on every router call that meets one. A write whose statement was in flight is
 * COMMIT_UNKNOWN (it may have been applied); nothing is ever DATABASE_ERROR, which is kept for what a working
 * session reports.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const proxy: CutProxy = await startCutProxy(b.url);
const raw = {
  servers: { a: a.url, b: proxy.url },
  catalog: 'a',
  logicalShards: 4,
  epoch: '2024-01-01T00:00:00Z',
  tables: {
    photos:
      'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
  },
  referenceTables: { plans: 'CREATE TABLE plans (id int PRIMARY KEY, name text)' },
};
const config = validateConfig(raw, 'test-config');
let router: Router;
const events: RouterEvent[] = [];

before(async () => {
  await initCluster(config);
  router = await createRouter(config, { poolSize: 4, onEvent: (e) => events.push(e) });
});
after(async () => {
  await router?.close();
});

/** Resolves once server b runs a statement holding `tag` (the statement is in flight, not queued). */
async function running(tag: string): Promise<void> {
  const c = await connect(b.url);
  try {
    for (let i = 0; i < 400; i++) {
      const { rows } = await c.query(
        "SELECT 1 FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
        [`%${tag}%`],
      );
      if (rows.length > 0) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`no statement with ${tag} ran on b`);
  } finally {
    await c.end();
  }
}

/** What `work` rejects with once the proxy cuts its connections while a statement holding `tag` runs on b. */
async function cutWhileRunning(tag: string, how: 'close' | 'reset', work: () => Promise<unknown>) {
  const outcome = work().then(
    () => assert.fail('the call succeeded although its connection was cut'),
    (error: unknown) => error,
  );
  await running(tag);
  proxy.cut(how);
  return outcome;
}

/** pg_sleep on server b only (server a answers at once), tagged so `running` finds it. */
const sleepOnB = (tag: string) =>
  `SELECT pg_sleep(CASE WHEN current_setting('port') = '${b.port}' THEN 5 ELSE 0 END) /* ${tag} */`;

function assertUnreachable(error: unknown, what: string) {
  assert.ok(error instanceof ShardflakeError, `${what}: not a ShardflakeError: ${String(error)}`);
  assert.equal(error.code, 'SERVER_UNREACHABLE', `${what}: ${error.code}: ${error.message}`);
}

const shardOnB = () => [0, 1, 2, 3].find((s) => router.placement(s).server === 'b') as number;
const shardOnA = () => [0, 1, 2, 3].find((s) => router.placement(s).server === 'a') as number;

describe('the one mapping, on what real connections throw', () => {
  it('a backend the server terminates (57P01, FATAL) is SERVER_UNREACHABLE and a lost connection', async () => {
    const victim = await connect(b.url);
    const killer = await connect(b.url);
    try {
      const pid = (await victim.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      const failed = victim.query('SELECT pg_sleep(5) /* terminated */').catch((e: unknown) => e);
      await running('terminated');
      await killer.query('SELECT pg_terminate_backend($1)', [pid]);
      const error = await failed;
      assert.equal((error as { code?: string }).code, '57P01');
      assert.equal(isConnectionLoss(error), true);
      assert.equal(isConnectionLost(error, victim), true);
      assert.equal(isNodeFailure(error), true);
      const wrapped = wrapPgError(error, b.url);
      assert.equal(wrapped.code, 'SERVER_UNREACHABLE');
      assert.equal(wrapped.sqlState, '57P01');
      assert.match(wrapped.message, /unreachable \(the server ended the session: terminating connection/);
      assert.doesNotMatch(wrapped.message, new RegExp(new URL(b.url).password));
    } finally {
      await victim.end().catch(() => {});
      await killer.end();
    }
  });

  for (const how of ['close', 'reset'] as const) {
    it(`a socket ${how === 'close' ? 'closed' : 'reset'} under a running statement is SERVER_UNREACHABLE`, async () => {
      const client = new pg.Client({ connectionString: proxy.url });
      client.on('error', () => {});
      await client.connect();
      const error = await cutWhileRunning(`raw-${how}`, how, () =>
        client.query(`SELECT pg_sleep(5) /* raw-${how} */`),
      );
      if (how === 'reset') assert.equal((error as { code?: string }).code, 'ECONNRESET');
      else assert.match(String((error as Error).message), /Connection terminated unexpectedly/);
      assert.equal(isConnectionLost(error, client), true);
      assert.equal(isNodeFailure(error), true);
      const wrapped = wrapPgError(error);
      assert.equal(wrapped.code, 'SERVER_UNREACHABLE');
      assert.equal(wrapped.sqlState, undefined);
      await client.end().catch(() => {});
    });
  }

  it('a port nothing listens on is SERVER_UNREACHABLE (ECONNREFUSED), from connect and from the raw error', async () => {
    const url = `postgres://postgres@127.0.0.1:${await freePort()}/postgres`;
    await assert.rejects(connect(url, { connectTimeoutMs: 2000 }), (e: ShardflakeError) => {
      assert.equal(e.code, 'SERVER_UNREACHABLE');
      assert.match(e.message, /ECONNREFUSED/);
      return true;
    });
    const raw = new pg.Client({ connectionString: url });
    const error = await raw.connect().then(
      () => assert.fail('connected'),
      (e: unknown) => e,
    );
    assert.equal(wrapPgError(error).code, 'SERVER_UNREACHABLE');
  });

  it('what a working session reports stays DATABASE_ERROR: a duplicate key, a lock timeout, a read-only write', async () => {
    const c = await connect(a.url);
    const holder = await connect(a.url);
    try {
      await c.query('CREATE TABLE IF NOT EXISTS public.lossy (id int PRIMARY KEY)');
      await c.query('INSERT INTO public.lossy VALUES (1) ON CONFLICT DO NOTHING');
      const duplicate = await c.query('INSERT INTO public.lossy VALUES (1)').catch((e: unknown) => e);
      await holder.query('BEGIN; LOCK public.lossy IN ACCESS EXCLUSIVE MODE');
      const timeout = await c
        .query("SET lock_timeout = '50ms'; SELECT * FROM public.lossy")
        .catch((e: unknown) => e);
      await holder.query('ROLLBACK');
      const readOnly = await c
        .query('BEGIN READ ONLY; INSERT INTO public.lossy VALUES (2)')
        .catch((e: unknown) => e);
      await c.query('ROLLBACK');
      for (const [error, state] of [
        [duplicate, '23505'],
        [timeout, '55P03'],
        [readOnly, '25006'],
      ] as const) {
        assert.equal(isConnectionLoss(error), false, state);
        assert.equal(isConnectionLost(error, c), false, state);
        const wrapped = wrapPgError(error);
        assert.equal(wrapped.code, 'DATABASE_ERROR', state);
        assert.equal(wrapped.sqlState, state);
      }
      // A write refused as read-only says the node is not the primary (a failover) without being a lost connection.
      assert.equal(isNodeFailure(readOnly), true);
    } finally {
      await c.end();
      await holder.end();
    }
  });
});

describe('every router call that meets a lost connection', () => {
  it('a shard session: a statement cut by session.query, by session.client (plain pg), closed or reset', async () => {
    const shard = shardOnB();
    for (const how of ['close', 'reset'] as const) {
      const viaQuery = await cutWhileRunning(`session-${how}`, how, () =>
        router.withShard({ shard }, (s) => s.query(sleepOnB(`session-${how}`))),
      );
      assertUnreachable(viaQuery, `withShard session.query (${how})`);
      const viaClient = await cutWhileRunning(`client-${how}`, how, () =>
        router.withShard({ shard }, (s) => s.client.query(sleepOnB(`client-${how}`))),
      );
      assertUnreachable(viaClient, `withShard session.client (${how})`);
    }
    const reported = events.filter(
      (e) => e.type === 'operation' && e.operation === 'withShard' && e.error !== undefined,
    );
    assert.ok(reported.length >= 4);
    for (const e of reported) assert.equal(e.type === 'operation' && e.error?.code, 'SERVER_UNREACHABLE');
  });

  it('withShards across both servers and withReference: the statement on the cut server, nothing committed', async () => {
    const shards = [shardOnA(), shardOnB()];
    const cross = await cutWhileRunning('cross', 'close', () =>
      router.withShards(
        shards.map((shard) => ({ shard })),
        async ([onA, onB]) => {
          await onA?.query("INSERT INTO photos (user_id, caption) VALUES (1, 'cut-cross')");
          await onB?.query(sleepOnB('cross'));
        },
      ),
    );
    assertUnreachable(cross, 'withShards');
    // withReference refuses pg_sleep (volatile: REFERENCE_NOT_DETERMINISTIC), so its statement on b is made to wait
    // on a row another transaction holds there: an uncommitted insert of the same key, straight to b.
    const blocker = await connect(b.url);
    await blocker.query(`BEGIN; SELECT shardflake_reference._shardflake_begin_write();
                         INSERT INTO shardflake_reference.plans VALUES (2, 'blocker')`);
    try {
      const reference = await cutWhileRunning('refwait', 'reset', () =>
        router.withReference(async (s) => {
          await s.query("INSERT INTO plans VALUES (1, 'cut-reference')");
          await s.query("INSERT INTO plans VALUES (2, 'cut-reference') /* refwait */");
        }),
      );
      assertUnreachable(reference, 'withReference');
    } finally {
      await blocker.query('ROLLBACK').finally(() => blocker.end());
    }
    // Nothing of either committed anywhere.
    const onA = await router.withShard({ shard: shards[0] as number }, async (s) =>
      Number((await s.query("SELECT count(*) AS n FROM photos WHERE caption = 'cut-cross'")).rows[0]?.n),
    );
    assert.equal(onA, 0);
    for (const server of [a, b]) {
      const c = await connect(server.url);
      const { rows } = await c.query('SELECT count(*)::int AS n FROM shardflake_reference.plans');
      await c.end();
      assert.equal(rows[0].n, 0, `plans on ${server.name}`);
    }
  });

  it('a server that refuses new connections: reads, sql across shards, writes and sessions are all SERVER_UNREACHABLE', async () => {
    const shard = shardOnB();
    const id = await router.insert('photos', { user_id: 7, caption: 'before' }, { shard });
    proxy.cut('close'); // the pools' idle connections go too
    proxy.down = true;
    try {
      const calls: [string, () => Promise<unknown>][] = [
        ['get', () => router.get('photos', id)],
        ['insert', () => router.insert('photos', { user_id: 7, caption: 'down' }, { shard })],
        ['update', () => router.update('photos', id, { caption: 'down' })],
        ['withShard', () => router.withShard({ shard }, (s) => s.query('SELECT 1'))],
        [
          'queryByShard',
          () => router.queryByShard({ sql: (t) => `SELECT * FROM ${t('photos')}`, shards: [shard] }),
        ],
        ['sql', () => router.sql('SELECT count(*) FROM photos')],
        ['withReference', () => router.withReference((s) => s.query('SELECT 1'))],
      ];
      for (const [name, call] of calls) {
        const error = await call().then(
          () => assert.fail(`${name} succeeded with server b down`),
          (e: unknown) => e,
        );
        assertUnreachable(error, name);
      }
    } finally {
      proxy.down = false;
    }
  });

  it('a server stopped (fast shutdown) in the middle of a statement: the session and the CLI both say SERVER_UNREACHABLE', async () => {
    const shard = shardOnB();
    const during = router
      .withShard({ shard }, (s) => s.query(sleepOnB('stopped')))
      .then(
        () => assert.fail('the session survived its server stopping'),
        (e: unknown) => e,
      );
    await running('stopped');
    await b.stop();
    const error = await during;
    assertUnreachable(error, 'withShard while its server stops');
    assert.equal((error as ShardflakeError).sqlState, '57P01');
    const file = `${process.env.TMPDIR ?? '/tmp'}/shardflake-loss-${process.pid}.json`;
    const { writeFile, rm } = await import('node:fs/promises');
    await writeFile(file, JSON.stringify(raw), { mode: 0o600 });
    try {
      const done = await startCli(['cluster', 'migrate', '--config', file]).done;
      assert.equal(done.code, 3, done.stderr);
      assert.match(done.stderr, /^shardflake: error \[SERVER_UNREACHABLE\]: /);
      assert.equal(done.stderr.trim().split('\n').length, 1, done.stderr);
    } finally {
      await rm(file, { force: true });
    }
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import type { ClusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { createRouter } from '../../packages/shardflake/src/router/router.js';
import type { OperationEvent, RouterEvent } from '../../packages/shardflake/src/telemetry/events.js';
import { CLI_MAIN } from '../support/cli.js';
import { sqlRows, useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';
import { assertNoPassword } from '../support/secrets.js';

/**
 * A cluster of one server listed as a primary and its streaming replica. `cluster init` must write only to the
 * primary (the replica refuses writes, so any write sent there would fail the init). Through one router: a write,
 * then a `readOnly` read of it while the replica's replay is paused, must see it (served by the primary), and
 * reads with nothing to wait for are served by the replica; then the primary is stopped and the replica promoted
 * while the router writes, and writes carry on there without a new router or config.
 */
const [primary] = (await useServers(1)) as [EmbeddedServer];
const replica = await startReplica(primary);
const config = validateConfig(
  {
    servers: { a: [replica.url, primary.url] },
    catalog: 'a',
    logicalShards: 4,
    tables: { notes: 'CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT next_id(), body text NOT NULL)' },
  },
  'test-config',
);
const result = await initCluster(config);
await caughtUp(primary, replica);
const events: RouterEvent[] = [];
const router = await createRouter(config, {
  onEvent: (e) => events.push(e),
  replicas: { rediscoverMs: 50, failoverWaitMs: 20_000, replicaCheckMs: 50 },
});
after(() => router.close());

const lastOperation = () => events.filter((e): e is OperationEvent => e.type === 'operation').at(-1);

describe('router over a primary and its replica', () => {
  it('cluster init wrote to the primary and the replica has every shard', async () => {
    assert.equal(result.created, 4);
    const onReplica = await sqlRows<{ n: number }>(
      replica.url,
      "SELECT count(*)::int AS n FROM pg_namespace WHERE nspname ~ '^shard_[0-9]{4}$'",
    );
    assert.equal(onReplica[0]?.n, 4);
  });

  it('with an OpenTelemetry SDK installed, each routed operation is a span naming its shard, node and role', async () => {
    const exporter = new InMemorySpanExporter();
    trace.setGlobalTracerProvider(
      new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    );
    try {
      await router.withShard({ shard: 2 }, async (s) => (await s.query('SELECT 1')).rows, { readOnly: true });
    } finally {
      trace.disable();
    }
    const [span] = exporter.getFinishedSpans();
    assert.equal(span?.name, 'shardflake withShard');
    assert.equal(span?.attributes['shardflake.shard'], 2);
    assert.equal(span?.attributes['shardflake.server'], 'a');
    assert.equal(span?.attributes['shardflake.role'], 'replica');
    assert.match(
      String(span?.attributes['shardflake.node']),
      new RegExp(`:\\*\\*\\*\\*@127\\.0\\.0\\.1:${replica.port}/`),
    );
  });

  it('a readOnly read after a write sees it while the replica is paused; other reads go to the replica', async () => {
    await sqlRows(replica.url, 'SELECT pg_wal_replay_pause()');
    const id = await router.withShard({ shard: 1 }, async (s) => {
      const { rows } = await s.query("INSERT INTO notes (body) VALUES ('hello') RETURNING id");
      return rows[0]?.id as bigint;
    });
    const seen = await router.withShard(
      { shard: 1 },
      async (s) => (await s.query('SELECT body FROM notes WHERE id = $1', [id])).rows,
      { readOnly: true },
    );
    assert.deepEqual(seen, [{ body: 'hello' }]);
    assert.deepEqual(
      lastOperation()?.nodes.map((n) => n.role),
      ['primary'],
    );

    // shard 2 of the same server: nothing written there by this router … but the position is per server, so a
    // fresh router (no writes of its own) shows the replica serving, with the paused replica's (empty) view
    const reader = await createRouter(config, { onEvent: (e) => events.push(e), listen: false });
    try {
      const rows = await reader.withShard(
        { shard: 1 },
        async (s) => (await s.query('SELECT body FROM notes WHERE id = $1', [id])).rows,
        { readOnly: true },
      );
      assert.deepEqual(rows, [], 'the paused replica does not have the row yet');
      assert.deepEqual(
        lastOperation()?.nodes.map((n) => n.role),
        ['replica'],
      );
      // … and with the writer's read token it goes to the primary and sees the row
      const withToken = await reader.withShard(
        { shard: 1 },
        async (s) => (await s.query('SELECT body FROM notes WHERE id = $1', [id])).rows,
        { readOnly: true, after: router.readToken() },
      );
      assert.deepEqual(withToken, [{ body: 'hello' }]);
    } finally {
      await reader.close();
    }
    await sqlRows(replica.url, 'SELECT pg_wal_replay_resume()');
  });

  it('cluster status: per-shard rows and activity, node roles, replica lag; --json from the CLI has it all', async () => {
    // a connection of its own, closed after: a backend reports its statistics when it exits
    await sqlRows(primary.url, "INSERT INTO shard_0002.notes (body) VALUES ('a'), ('b'), ('c')");
    await sqlRows(primary.url, "UPDATE shard_0002.notes SET body = 'B' WHERE body = 'b'");
    await sqlRows(primary.url, "DELETE FROM shard_0002.notes WHERE body = 'c'");
    await sqlRows(replica.url, 'SELECT pg_wal_replay_pause()');
    await sqlRows(
      primary.url,
      "INSERT INTO shard_0003.notes (body) SELECT repeat('x', 100) FROM generate_series(1, 500)",
    );
    const dir = mkdtempSync(join(tmpdir(), 'shardflake-status-'));
    const path = join(dir, 'cluster.json');
    writeFileSync(
      path,
      JSON.stringify({
        servers: { a: [replica.url, primary.url] },
        catalog: 'a',
        logicalShards: 4,
        tables: { notes: 'CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT next_id(), body text NOT NULL)' },
      }),
    );
    const run = spawnSync(process.execPath, [CLI_MAIN, 'cluster', 'status', '--config', path, '--json'], {
      encoding: 'utf8',
    });
    await sqlRows(replica.url, 'SELECT pg_wal_replay_resume()');
    assert.equal(run.status, 0, run.stderr);
    const status = JSON.parse(run.stdout) as ClusterStatus;
    assert.equal(status.version, 1);
    const shard2 = status.shards.find((s) => s.shard === 2);
    assert.deepEqual(
      {
        schema: shard2?.schema,
        rows: shard2?.rows,
        inserts: shard2?.inserts,
        updates: shard2?.updates,
        deletes: shard2?.deletes,
      },
      { schema: 'shard_0002', rows: 2, inserts: 3, updates: 1, deletes: 1 },
    );
    assert.ok((status.shards.find((s) => s.shard === 3)?.bytes ?? 0) > 50_000);
    const [server] = status.servers;
    assert.deepEqual(
      server?.nodes.map((n) => n.role),
      ['replica', 'primary'],
    );
    const [onReplica, onPrimary] = server?.nodes ?? [];
    assert.ok((onReplica?.lagBytes ?? 0) > 50_000, `replica lag ${onReplica?.lagBytes} bytes while paused`);
    assert.equal(onPrimary?.lagBytes, 0);
    assert.ok((onPrimary?.connections ?? 0) >= 1);
    assertNoPassword(run.stdout, [primary.url, replica.url], 'the status');
    const text = spawnSync(process.execPath, [CLI_MAIN, 'cluster', 'status', '--config', path], {
      encoding: 'utf8',
    });
    assert.match(text.stdout, /replica +postgres:\/\/postgres:\*\*\*\*@.*connections.*lag/);
  });

  it('writes reach the promoted replica without a restart, and every acknowledged write is there', async () => {
    const acknowledged: bigint[] = [];
    const failures: unknown[] = [];
    let stop = false;
    let promotedAt = 0;
    let firstAfter = 0;
    const writer = (async () => {
      for (let i = 0; !stop; i++) {
        try {
          acknowledged.push(await router.insert('notes', { body: `n${i}` }, { shard: i % 4 }));
          if (promotedAt && !firstAfter) firstAfter = performance.now();
        } catch (error) {
          failures.push(error);
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    })();
    // bounded: a writer that failed early must fail the test, not leave it waiting
    const warmUntil = performance.now() + 20_000;
    while (acknowledged.length < 30 && performance.now() < warmUntil)
      await new Promise((r) => setTimeout(r, 10));
    assert.ok(
      acknowledged.length >= 30,
      `the writer stalled before the failover: ${failures.length} errors, last ${String(failures.at(-1))}`,
    );
    await primary.stop();
    await new Promise((r) => setTimeout(r, 300));
    await replica.promote();
    promotedAt = performance.now();
    while (!firstAfter && performance.now() - promotedAt < 10_000)
      await new Promise((r) => setTimeout(r, 20));
    const at = acknowledged.length;
    while (acknowledged.length < at + 10 && performance.now() - promotedAt < 10_000)
      await new Promise((r) => setTimeout(r, 10));
    stop = true;
    await writer;
    assert.ok(
      firstAfter > 0 && firstAfter - promotedAt < 10_000,
      'no write succeeded within 10 s of the promotion',
    );
    const ids = new Set(
      (
        await sqlRows<{ id: string }>(
          replica.url,
          `SELECT id::text FROM (${[0, 1, 2, 3].map((s) => `SELECT id FROM shard_000${s}.notes`).join(' UNION ALL ')}) x`,
        )
      ).map((r) => r.id),
    );
    assert.deepEqual(
      acknowledged.filter((id) => !ids.has(String(id))),
      [],
    );
    // a failed insert is a typed error, never a silent loss
    for (const f of failures) assert.equal((f as Error).name, 'ShardflakeError', String(f));
    assert.ok(events.some((e) => e.type === 'roles-found' && e.primary?.includes(`:${replica.port}/`)));
    // the catalog is on this server too: the router reads and listens to the map on the promoted node again
    const deadline = performance.now() + 15_000;
    while (router.catalogDown && performance.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.equal(router.catalogDown, false);
    await router.refresh();
    assert.equal(router.mapVersion, 1n);
  });
});

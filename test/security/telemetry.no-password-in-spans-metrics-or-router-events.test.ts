import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { metrics, trace } from '@opentelemetry/api';
import { createRouter, isShardflakeError, type RouterEvent } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { testConfig } from '../cluster/cluster-config.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';
import { testTelemetry } from '../support/telemetry.js';

/**
 * What a router tells its observers — the events an application logs (`onEvent`), the OpenTelemetry spans and
 * metrics — never holds a server's password: checked on a real router over two servers with random passwords,
 * through successful operations, a failing statement, and operations on a server that has stopped (whose errors
 * name its URL). The unit test of the spans (topology/telemetry.*) feeds made-up events that are redacted already;
 * this one takes them from the router.
 */

const { exporter, reader, tracerProvider, meterProvider } = testTelemetry();
trace.setGlobalTracerProvider(tracerProvider);
metrics.setGlobalMeterProvider(meterProvider);
after(() => {
  trace.disable();
  metrics.disable();
});

const servers = await useServers(2);
const urls = servers.map((s) => s.url);
const config = testConfig(servers, { logicalShards: 4 });

/** JSON of anything the observers got (bigints as text, errors with their message and code). */
function json(value: unknown): string {
  return JSON.stringify(value, (_, v) => {
    if (typeof v === 'bigint') return v.toString();
    if (v instanceof Error)
      return { message: v.message, code: (v as { code?: string }).code, stack: v.stack };
    return v;
  });
}

test('no password in router events, spans, span statuses or metrics, also when a server is down', async () => {
  await initCluster(config);
  const events: RouterEvent[] = [];
  const router = await createRouter(config, { onEvent: (e) => events.push(e) });
  try {
    for (let key = 0; key < 8; key++) {
      const id = await router.insert('photos', { user_id: key, caption: `c${key}` }, { key });
      assert.ok(await router.get('photos', id));
    }
    await router.query({ sql: (t) => `SELECT id, caption FROM ${t('photos')}` });
    await assert.rejects(
      router.withShard({ shard: 0 }, (s) => s.query('SELECT no_such_column FROM photos')),
      (e: unknown) => isShardflakeError(e, 'DATABASE_ERROR'),
    );
    await servers[1]?.stop();
    const onB = [0, 1, 2, 3].filter((shard) => router.placement(shard).server === servers[1]?.name);
    assert.ok(onB.length > 0, 'server b holds shards');
    for (const shard of onB) {
      await assert.rejects(
        router.withShard({ shard }, (s) => s.query('SELECT 1')),
        isShardflakeError,
      );
    }
  } finally {
    await router.close();
  }

  const spans = exporter.getFinishedSpans();
  const failed = spans.filter((s) => s.status.message);
  assert.ok(spans.length >= 18, `spans were recorded (${spans.length})`);
  assert.ok(failed.length >= 2, 'and the failures with their messages');
  // A database error's message names the server's URL (masked): the check below would see a password there.
  assert.ok(failed.some((s) => /postgres:\/\/postgres:\*\*\*\*@/.test(s.status.message ?? '')));
  assert.ok(
    spans.some((s) => String(s.attributes['shardflake.node']).includes(':****@')),
    'a span names its node, with the password masked',
  );
  const recorded = json(
    spans.map((s) => ({ name: s.name, attributes: s.attributes, status: s.status, events: s.events })),
  );
  assertNoPassword(recorded, urls, 'the spans');
  assertNoPassword(json(await reader.collect()), urls, 'the metrics');
  assert.ok(
    events.some((e) => e.type === 'operation' && e.error),
    'the events hold the failures',
  );
  assertNoPassword(json(events), urls, 'the router events');
});

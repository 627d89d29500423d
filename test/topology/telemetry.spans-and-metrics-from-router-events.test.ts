import assert from 'node:assert/strict';
import { test } from 'node:test';
import { metrics, SpanStatusCode, trace } from '@opentelemetry/api';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { ShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import type { OperationEvent } from '../../packages/shardflake/src/telemetry/events.js';
import { telemetryHook, telemetryInstalled } from '../../packages/shardflake/src/telemetry/telemetry.js';
import { PullReader, testTelemetry } from '../support/telemetry.js';

const base: OperationEvent = {
  type: 'operation',
  operation: 'withShard',
  shards: [42],
  servers: ['a'],
  nodes: [{ node: 'postgres://postgres:****@10.0.0.2:5432/app', role: 'replica' }],
  waitMs: 1.5,
  totalMs: 250,
  retries: 0,
  retryReasons: [],
};

test('each operation event is a span back-dated by its total time, with the metrics counted', async () => {
  const { exporter, reader, tracer, meter } = testTelemetry();
  const hook = telemetryHook({ tracer, meter });

  const before = Date.now();
  hook(base);
  hook({
    ...base,
    operation: 'insert',
    nodes: [{ node: 'postgres://postgres:****@10.0.0.1:5432/app', role: 'primary' }],
    retries: 2,
    retryReasons: ['moving', 'failover'],
    error: new ShardflakeError('SHARD_FENCED', 'shard 42 moved'),
  });
  hook({ type: 'retry', operation: 'insert', shard: 42, attempt: 1, reason: 'failover', woke: 'timeout' });
  hook({ type: 'node-suspect', server: 'a', node: 'postgres://postgres:****@10.0.0.1:5432/app' });
  hook({ type: 'roles-found', server: 'a', node: 'x', primary: 'x' });
  hook({ type: 'catalog-down', server: 'a' });
  hook({ type: 'catalog-up', server: 'a' });
  hook({ type: 'map', version: 2n, previous: 1n, read: 'changes', shardRows: 1 });

  const [ok, failed] = exporter.getFinishedSpans();
  assert.ok(ok && failed);
  assert.equal(ok.name, 'shardflake withShard');
  assert.deepEqual(
    {
      shard: ok.attributes['shardflake.shard'],
      server: ok.attributes['shardflake.server'],
      role: ok.attributes['shardflake.role'],
      node: ok.attributes['shardflake.node'],
      wait: ok.attributes['shardflake.wait_ms'],
    },
    {
      shard: 42,
      server: 'a',
      role: 'replica',
      node: 'postgres://postgres:****@10.0.0.2:5432/app',
      wait: 1.5,
    },
  );
  const ms = (t: [number, number]) => t[0] * 1000 + t[1] / 1e6;
  const duration = ms(ok.endTime) - ms(ok.startTime);
  assert.ok(Math.abs(duration - 250) < 1, `span lasts ${duration} ms`);
  assert.ok(ms(ok.startTime) >= before - 251 && ms(ok.startTime) <= Date.now() - 249);
  assert.equal(ok.status.code, SpanStatusCode.UNSET);
  assert.equal(failed.status.code, SpanStatusCode.ERROR);
  assert.equal(failed.attributes['error.type'], 'SHARD_FENCED');
  assert.equal(failed.attributes['shardflake.retries'], 2);
  assert.deepEqual(failed.attributes['shardflake.retry_reasons'], ['moving', 'failover']);

  const { resourceMetrics } = await reader.collect();
  const found = new Map(
    resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).map((m) => [m.descriptor.name, m]),
  );
  const points = (name: string) =>
    (found.get(name)?.dataPoints ?? []).map((p) => ({ attributes: p.attributes, value: p.value }));
  assert.deepEqual(
    points('shardflake.router.operations').map((p) => [
      p.attributes['shardflake.outcome'],
      p.attributes['shardflake.role'],
      p.value,
    ]),
    [
      ['ok', 'replica', 1],
      ['SHARD_FENCED', 'primary', 1],
    ],
  );
  const [histogram] = points('shardflake.router.operation.duration');
  assert.ok(histogram);
  assert.equal((histogram.value as { sum: number }).sum, 250);
  assert.deepEqual(
    points('shardflake.router.retries').map((p) => [p.attributes['shardflake.retry_reason'], p.value]),
    [['failover', 1]],
  );
  assert.equal(points('shardflake.router.failover.events').length, 2);
  assert.deepEqual(
    points('shardflake.router.catalog.outages').map((p) => p.value),
    [1],
  );
  assert.deepEqual(
    points('shardflake.router.map.changes').map((p) => p.value),
    [1],
  );
});

test('telemetryInstalled tells an installed SDK from the API’s no-op providers', () => {
  assert.equal(telemetryInstalled(), false);
  const provider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(new InMemorySpanExporter())],
  });
  assert.equal(trace.setGlobalTracerProvider(provider), true);
  try {
    assert.equal(telemetryInstalled(), true);
  } finally {
    trace.disable();
  }
  assert.equal(telemetryInstalled(), false);
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [new PullReader()] }));
  try {
    assert.equal(telemetryInstalled(), true);
  } finally {
    metrics.disable();
  }
  assert.equal(telemetryInstalled(), false);
});

test('without an SDK the hook runs on the API’s no-op tracer and meter', () => {
  const hook = telemetryHook();
  for (let i = 0; i < 1000; i++) hook(base);
  hook({ ...base, error: new ShardflakeError('SHARD_BUSY', 'busy') });
});

import { createRequire } from 'node:module';
import type * as OpenTelemetry from '@opentelemetry/api';
import type { Attributes, Counter, Histogram, Meter, Tracer } from '@opentelemetry/api';
import type { OperationEvent, RouterEvent, RouterEventHook } from './events.js';
import { VERSION } from './version.js';

/**
 * The router's events as OpenTelemetry spans and metrics, through `@opentelemetry/api` only. Without an SDK
 * installed by the application the API hands out no-op tracers and meters, so this costs a few object look-ups
 * per operation; with one, every routed operation is a span and the counters and histograms below fill.
 *
 * A span is made when the operation has ended (the router reports it then, with its total time), so its start
 * is back-dated by `totalMs`; it is a child of whatever span is active where the application called the router.
 *
 * Metrics (names follow the OpenTelemetry naming guidelines; durations in milliseconds):
 * - `shardflake.router.operations` (counter): operation, outcome (`ok` / the error code), role
 * - `shardflake.router.operation.duration` (histogram, ms): operation, outcome
 * - `shardflake.router.connection.wait` (histogram, ms): operation
 * - `shardflake.router.retries` (counter): operation, reason
 * - `shardflake.router.failover.events` (counter): server, event (`node-suspect`, `roles-found`)
 * - `shardflake.router.catalog.outages` (counter): server — one per `catalog-down`
 * - `shardflake.router.map.changes` (counter)
 * - `shardflake.router.transaction.steps` (counter): phase (`prepare`, `decide`, `commit-prepared`, …), outcome
 * - `shardflake.router.deadlocks` (counter): deadlocks across servers this router broke, by how many servers
 *   they spanned (`shardflake.deadlock.servers`)
 *
 * Each step of a cross-server commit (and of recovery) that ends is also a span, `shardflake 2pc <phase>`, with
 * the server, the txid and the gid: a slow or failed PREPARE or COMMIT PREPARED shows on its own. A deadlock
 * broken is a span `shardflake deadlock`, back-dated by how long the victim waited, with the victim's txid, the
 * transactions and the servers of the cycle.
 */
export interface TelemetryOptions {
  /** Default: `trace.getTracer('shardflake', VERSION)` from the globally installed provider (if any). */
  tracer?: Tracer;
  /** Default: `metrics.getMeter('shardflake', VERSION)`. */
  meter?: Meter;
}

/**
 * `@opentelemetry/api`, loaded with the first event rather than with shardflake (≈ 30 ms of CPU to import). Its
 * CommonJS build is the same API: providers register on a global that every copy of the API reads.
 */
let api: typeof OpenTelemetry | undefined;
function otel(): typeof OpenTelemetry {
  api ??= createRequire(import.meta.url)('@opentelemetry/api') as typeof OpenTelemetry;
  return api;
}

let seen: { tracers: unknown; meters: unknown; installed: boolean } | undefined;
let noop: { tracers: unknown; meter: unknown } | undefined;

/**
 * True when the application has installed an OpenTelemetry SDK (a tracer or a meter provider). The router asks
 * before each operation and builds no event for telemetry when nothing would record it: two global look-ups,
 * the answer cached until a provider changes.
 */
export function telemetryInstalled(): boolean {
  const api = otel();
  // What the API hands out while no SDK is installed: a fresh proxy's delegate is the API's no-op tracer
  // provider, and the no-op meter provider's meters are the one no-op meter.
  noop ??= { tracers: new api.ProxyTracerProvider().getDelegate(), meter: api.createNoopMeter() };
  const proxy = api.trace.getTracerProvider();
  const tracers = proxy instanceof api.ProxyTracerProvider ? proxy.getDelegate() : proxy;
  const meters = api.metrics.getMeterProvider();
  if (seen?.tracers !== tracers || seen.meters !== meters) {
    seen = {
      tracers,
      meters,
      installed: tracers !== noop.tracers || meters.getMeter('shardflake', VERSION) !== noop.meter,
    };
  }
  return seen.installed;
}

interface Instruments {
  operations: Counter;
  duration: Histogram;
  wait: Histogram;
  retries: Counter;
  failovers: Counter;
  outages: Counter;
  mapChanges: Counter;
  transactionSteps: Counter;
  deadlocks: Counter;
}

function instruments(meter: Meter): Instruments {
  return {
    operations: meter.createCounter('shardflake.router.operations', {
      description: 'Routed operations, by outcome',
    }),
    duration: meter.createHistogram('shardflake.router.operation.duration', {
      description: 'Time from the call to the end of a routed operation, retries included',
      unit: 'ms',
    }),
    wait: meter.createHistogram('shardflake.router.connection.wait', {
      description: 'Time a routed operation waited for connections',
      unit: 'ms',
    }),
    retries: meter.createCounter('shardflake.router.retries', { description: 'Retries, by reason' }),
    failovers: meter.createCounter('shardflake.router.failover.events', {
      description: 'Nodes marked suspect and roles found again',
    }),
    outages: meter.createCounter('shardflake.router.catalog.outages', {
      description: 'Times the catalog stopped answering',
    }),
    mapChanges: meter.createCounter('shardflake.router.map.changes', { description: 'Shard map refreshes' }),
    transactionSteps: meter.createCounter('shardflake.router.transaction.steps', {
      description: 'Steps of commits across servers and of their recovery, by phase and outcome',
    }),
    deadlocks: meter.createCounter('shardflake.router.deadlocks', {
      description: "Deadlocks across servers broken by cancelling one of this router's transactions",
    }),
  };
}

function spanAttributes(event: OperationEvent): Attributes {
  const one = <T>(values: T[]): T | T[] | undefined =>
    values.length === 1 ? values[0] : values.length ? values : undefined;
  const attributes: Attributes = {
    'db.system.name': 'postgresql',
    'shardflake.operation': event.operation,
    'shardflake.shard': one(event.shards),
    'shardflake.server': one(event.servers),
    'shardflake.node': one(event.nodes.map((n) => n.node)),
    'shardflake.role': one([...new Set(event.nodes.map((n) => n.role))]),
    'shardflake.wait_ms': event.waitMs,
    'shardflake.retries': event.retries,
  };
  if (event.retryReasons.length) attributes['shardflake.retry_reasons'] = event.retryReasons;
  if (event.error) attributes['error.type'] = event.error.code;
  return attributes;
}

/**
 * The metric attribute sets, made once per (operation, outcome, role) and reused: a few dozen combinations in all,
 * and no allocation per operation.
 */
const labelSets = new Map<string, { operation: Attributes; duration: Attributes; wait: Attributes }>();
function metricLabels(operation: string, outcome: string, role: string) {
  const key = `${operation}|${outcome}|${role}`;
  let labels = labelSets.get(key);
  if (!labels) {
    labels = {
      operation: {
        'shardflake.operation': operation,
        'shardflake.outcome': outcome,
        'shardflake.role': role,
      },
      duration: { 'shardflake.operation': operation, 'shardflake.outcome': outcome },
      wait: { 'shardflake.operation': operation },
    };
    labelSets.set(key, labels);
  }
  return labels;
}

/**
 * A hook for `RouterOptions.onEvent` (the router installs one itself) that reports every event to OpenTelemetry.
 * Tracer and meter are looked up on the first event, so an SDK installed after the router was made still counts.
 */
export function telemetryHook(options: TelemetryOptions = {}): RouterEventHook {
  let tracer = options.tracer;
  let meter: Instruments | undefined;
  const meters = () => {
    meter ??= instruments(options.meter ?? otel().metrics.getMeter('shardflake', VERSION));
    return meter;
  };
  return (event: RouterEvent) => {
    const m = meters();
    switch (event.type) {
      case 'operation': {
        tracer ??= otel().trace.getTracer('shardflake', VERSION);
        const end = Date.now();
        const span = tracer.startSpan(`shardflake ${event.operation}`, {
          kind: otel().SpanKind.CLIENT,
          startTime: end - event.totalMs,
        });
        // Without an SDK the span records nothing: its attributes are not even built.
        if (span.isRecording()) {
          span.setAttributes(spanAttributes(event));
          if (event.error)
            span.setStatus({ code: otel().SpanStatusCode.ERROR, message: event.error.message });
        }
        span.end(end);
        const outcome = event.error ? event.error.code : 'ok';
        const role = event.nodes.some((n) => n.role === 'primary')
          ? 'primary'
          : (event.nodes[0]?.role ?? 'none');
        const labels = metricLabels(event.operation, outcome, role);
        m.operations.add(1, labels.operation);
        m.duration.record(event.totalMs, labels.duration);
        m.wait.record(event.waitMs, labels.wait);
        return;
      }
      case 'retry':
        m.retries.add(1, {
          'shardflake.operation': event.operation,
          'shardflake.retry_reason': event.reason,
        });
        return;
      case 'node-suspect':
      case 'roles-found':
      case 'stray-fenced':
        m.failovers.add(1, { 'shardflake.server': event.server, 'shardflake.event': event.type });
        return;
      case 'catalog-down':
        m.outages.add(1, { 'shardflake.server': event.server });
        return;
      case 'catalog-up':
        return;
      case 'map':
        m.mapChanges.add(1);
        return;
      case 'transaction': {
        if (event.step === 'start') return;
        tracer ??= otel().trace.getTracer('shardflake', VERSION);
        const end = Date.now();
        const span = tracer.startSpan(`shardflake 2pc ${event.phase}`, {
          kind: otel().SpanKind.CLIENT,
          startTime: end - (event.ms ?? 0),
        });
        if (span.isRecording()) {
          span.setAttributes({
            'db.system.name': 'postgresql',
            'shardflake.transaction.phase': event.phase,
            'shardflake.transaction.txid': event.txid,
            'shardflake.server': event.server,
            ...(event.gid === undefined ? {} : { 'shardflake.transaction.gid': event.gid }),
            ...(event.error ? { 'error.type': event.error.code } : {}),
          });
          if (event.step === 'failed')
            span.setStatus({ code: otel().SpanStatusCode.ERROR, message: event.error?.message ?? 'failed' });
        }
        span.end(end);
        m.transactionSteps.add(1, {
          'shardflake.transaction.phase': event.phase,
          'shardflake.outcome': event.step === 'done' ? 'ok' : (event.error?.code ?? 'failed'),
        });
        return;
      }
      case 'deadlock': {
        tracer ??= otel().trace.getTracer('shardflake', VERSION);
        const end = Date.now();
        const span = tracer.startSpan('shardflake deadlock', {
          kind: otel().SpanKind.INTERNAL,
          startTime: end - event.waitedMs,
        });
        if (span.isRecording())
          span.setAttributes({
            'db.system.name': 'postgresql',
            'shardflake.deadlock.victim': event.victim,
            'shardflake.deadlock.transactions': event.transactions,
            'shardflake.deadlock.sessions': event.sessions,
            'shardflake.server': event.servers,
          });
        span.end(end);
        m.deadlocks.add(1, { 'shardflake.deadlock.servers': event.servers.length });
        return;
      }
    }
  };
}

import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';

/** A metric reader the test pulls from (the SDK's periodic reader would export on a timer). */
export class PullReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

/** OpenTelemetry SDK providers whose spans (`exporter`) and metrics (`reader`) a test reads back. */
export function testTelemetry() {
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const reader = new PullReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    exporter,
    reader,
    tracerProvider,
    meterProvider,
    tracer: tracerProvider.getTracer('t'),
    meter: meterProvider.getMeter('t'),
  };
}

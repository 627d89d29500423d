import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { BinaryCopyRows, CopyMeter, parseThrottle } from '../../packages/shardflake/src/move/copy-stream.js';

/** A binary COPY stream (PostgreSQL docs, "COPY — Binary Format") of `rows`, each a list of fields (null = NULL). */
function binaryCopy(rows: readonly (readonly (Uint8Array | null)[])[], extension: Uint8Array): Buffer {
  const parts: Buffer[] = [Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1')];
  const int32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeInt32BE(n);
    return b;
  };
  const int16 = (n: number) => {
    const b = Buffer.alloc(2);
    b.writeInt16BE(n);
    return b;
  };
  parts.push(int32(0), int32(extension.length), Buffer.from(extension));
  for (const row of rows) {
    parts.push(int16(row.length));
    for (const field of row)
      parts.push(...(field === null ? [int32(-1)] : [int32(field.length), Buffer.from(field)]));
  }
  parts.push(int16(-1));
  return Buffer.concat(parts);
}

test('the row counter of the copy stream counts every row of a binary COPY, however the stream is cut into chunks', () => {
  fc.assert(
    fc.property(
      fc.array(fc.array(fc.option(fc.uint8Array({ maxLength: 12 }), { nil: null }), { maxLength: 5 }), {
        maxLength: 40,
      }),
      fc.uint8Array({ maxLength: 6 }),
      fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 50 }),
      (rows, extension, cuts) => {
        const data = binaryCopy(rows, extension);
        const counter = new BinaryCopyRows();
        let at = 0;
        for (let i = 0; at < data.length; i++) {
          const size = cuts[i % cuts.length] as number;
          counter.push(data.subarray(at, at + size));
          at += size;
        }
        assert.equal(counter.rows, rows.length);
        assert.equal(counter.bytes, data.length);
      },
    ),
  );
});

test('a throttle is parsed from rows/s or bytes/s, refuses 0, and holds the copy back by the time the rate allows', () => {
  assert.deepEqual(parseThrottle('5000rows/s'), { rowsPerSecond: 5000 });
  assert.deepEqual(parseThrottle('20MB/s'), { bytesPerSecond: 20_000_000 });
  assert.deepEqual(parseThrottle('512kB/s'), { bytesPerSecond: 512_000 });
  for (const bad of ['0rows/s', '0MB/s', '-1MB/s', 'fast', '10 rows']) {
    assert.throws(
      () => parseThrottle(bad),
      (e) => isShardflakeError(e, 'INVALID_ARGUMENT'),
      bad,
    );
  }
  // 500 rows at 1,000 rows/s may pass half a second after the meter started, less the time since, not before.
  // The meter reads the real clock: the time spent around it is measured, so a busy machine that pauses this
  // process between two lines moves the bound with it instead of failing the test (a µs spared for rounding).
  const since = (start: number) => performance.now() - start + 0.001;
  let started = performance.now();
  const meter = new CopyMeter({ rowsPerSecond: 1000 });
  meter.rows = 500;
  const wait = meter.delayMs();
  let spent = since(started);
  assert.ok(wait >= 500 - spent && wait <= 500, `waits ${wait} ms, ${spent} ms after it started`);
  started = performance.now();
  const bytes = new CopyMeter({ bytesPerSecond: 1_000_000 });
  bytes.bytes = 100_000;
  const byteWait = bytes.delayMs();
  spent = since(started);
  assert.ok(byteWait >= 100 - spent && byteWait <= 100, `waits ${byteWait} ms, ${spent} ms after it started`);
  assert.equal(new CopyMeter({}).delayMs(), 0, 'no throttle, no wait');
});

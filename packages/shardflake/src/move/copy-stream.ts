import { Transform, type TransformCallback } from 'node:stream';
import { ShardflakeError } from '../errors/errors.js';

/**
 * The stream between a source's `COPY … TO STDOUT (FORMAT binary)` and a target's `COPY … FROM STDIN (FORMAT
 * binary)`: it passes the bytes on untouched, counts the rows as they go by (for progress and for a throttle in
 * rows per second), and holds the stream back when a shared rate limit is reached, so a move does not starve the
 * source's production traffic. Back-pressure does the rest: the source's COPY waits while this stream waits.
 *
 * The binary COPY format (PostgreSQL docs, "COPY — Binary Format"):
 *   header  11-byte signature | int32 flags | int32 header-extension length | extension bytes
 *   tuple   int16 field count | per field: int32 length (-1 = NULL) | that many bytes
 *   trailer int16 -1
 */
export class BinaryCopyRows {
  rows = 0;
  bytes = 0;
  /** Bytes of a fixed-size part (header, field count, field length) split across chunks. */
  private partial: Buffer = Buffer.alloc(0);
  private skip = 0;
  private fieldsLeft = 0;
  private state: 'header' | 'tuple' | 'length' | 'end' = 'header';

  /** Counts the rows that start in `chunk`. */
  push(chunk: Buffer): void {
    this.bytes += chunk.length;
    let i = 0;
    while (i < chunk.length && this.state !== 'end') {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - i);
        this.skip -= n;
        i += n;
        continue;
      }
      const need = this.state === 'header' ? 19 : this.state === 'tuple' ? 2 : 4;
      let part: Buffer;
      if (this.partial.length === 0 && chunk.length - i >= need) {
        part = chunk.subarray(i, i + need);
        i += need;
      } else {
        const take = Math.min(need - this.partial.length, chunk.length - i);
        this.partial = Buffer.concat([this.partial, chunk.subarray(i, i + take)]);
        i += take;
        if (this.partial.length < need) return;
        part = this.partial;
        this.partial = Buffer.alloc(0);
      }
      if (this.state === 'header') {
        this.skip = part.readInt32BE(15);
        this.state = 'tuple';
      } else if (this.state === 'tuple') {
        const fields = part.readInt16BE(0);
        if (fields === -1) this.state = 'end';
        else {
          this.rows++;
          this.fieldsLeft = fields;
          this.state = fields > 0 ? 'length' : 'tuple';
        }
      } else {
        const length = part.readInt32BE(0);
        if (length > 0) this.skip = length;
        this.fieldsLeft--;
        if (this.fieldsLeft === 0) this.state = 'tuple';
      }
    }
  }
}

/** A copy throttle: at most so many rows or bytes per second (whichever is given), over all tables of a move. */
export interface Throttle {
  /** Most rows copied per second, above 0; with `bytesPerSecond` too, whichever is stricter holds. */
  rowsPerSecond?: number;
  /** Most bytes of COPY data per second (1 MB = 1,000,000 bytes), above 0. */
  bytesPerSecond?: number;
}

/**
 * Parses a throttle as written on the command line: `5000rows/s`, `20MB/s`, `512kB/s` (1 MB = 1,000,000 bytes).
 * Zero, negative or unparsable values are refused: a throttle of 0 would never finish.
 */
export function parseThrottle(text: string): Throttle {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(rows|B|kB|MB|GB)\/s\s*$/i.exec(text);
  const value = m ? Number(m[1]) : Number.NaN;
  if (!m || !(value > 0)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--throttle must be a rate above 0 such as 5000rows/s or 20MB/s, not ${JSON.stringify(text)}`,
    );
  }
  const unit = (m[2] as string).toLowerCase();
  if (unit === 'rows') return { rowsPerSecond: value };
  const scale = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9 }[unit] as number;
  return { bytesPerSecond: value * scale };
}

/** Refuses a throttle that is not a positive, finite rate. */
export function checkThrottle(throttle: Throttle | undefined): void {
  if (throttle === undefined) return;
  for (const [name, value] of Object.entries(throttle)) {
    if (value !== undefined && !(typeof value === 'number' && Number.isFinite(value) && value > 0)) {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `throttle ${name} must be a number above 0, not ${value}`,
      );
    }
  }
  if (throttle.rowsPerSecond === undefined && throttle.bytesPerSecond === undefined) {
    throw new ShardflakeError('INVALID_ARGUMENT', 'a throttle needs rowsPerSecond or bytesPerSecond');
  }
}

/** Shared by every copy stream of one move: the totals so far and the time they started. */
export class CopyMeter {
  rows = 0;
  bytes = 0;
  private readonly started = performance.now();

  constructor(private readonly throttle: Throttle = {}) {}

  /** How long to wait before passing more data, in ms (0 when under the limit). */
  delayMs(): number {
    const elapsed = (performance.now() - this.started) / 1000;
    const { rowsPerSecond, bytesPerSecond } = this.throttle;
    const byRows = rowsPerSecond ? this.rows / rowsPerSecond - elapsed : 0;
    const byBytes = bytesPerSecond ? this.bytes / bytesPerSecond - elapsed : 0;
    return Math.max(0, byRows, byBytes) * 1000;
  }
}

/** The pass-through stream for one table's copy, feeding `meter`. */
export function meteredCopy(meter: CopyMeter): Transform & { counter: BinaryCopyRows } {
  const counter = new BinaryCopyRows();
  const stream = new Transform({
    transform(chunk: Buffer, _encoding, done: TransformCallback) {
      const rowsBefore = counter.rows;
      counter.push(chunk);
      meter.rows += counter.rows - rowsBefore;
      meter.bytes += chunk.length;
      const wait = meter.delayMs();
      if (wait > 0) setTimeout(() => done(null, chunk), wait);
      else done(null, chunk);
    },
  });
  return Object.assign(stream, { counter });
}

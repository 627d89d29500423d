import { optionsObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { type LayoutInput, tickOf } from './codec.js';
import { type Layout, type LayoutField, resolveLayout } from './layout.js';

/**
 * App-side generator for any layout (for code that needs an id before the row reaches Postgres).
 *
 * Guarantees, per generator object: every id is strictly greater than the one before; nothing ever wraps; and
 * `next()` never waits longer than about one tick of real time, whatever the clock does.
 * - When a tick's sequence is used up, `next()` waits (spins on the clock) for the next tick — for at most one
 *   tick length of real time (performance.now(), which no injected clock or wall-clock step affects). A clock
 *   that has not moved by then (stalled, a test's fake timers, a wall clock slewed back) is not waited for: the
 *   generator borrows the next tick, as below.
 * - When the clock steps backwards, ids continue from the last tick issued (a logical clock): the sequence keeps
 *   counting in that tick, and if it fills up the tick advances by one without waiting.
 * Either way ids run ahead of the clock by at most (ids issued) / (sequence values per tick) ticks — precisely,
 * the k-th id's tick is at most the highest clock reading so far + ⌊(k − 1) / sequence values⌋, since every tick
 * borrowed past the clock was full first — and are back on the clock as soon as it passes the last tick issued.
 * Nothing is ever reissued.
 * Uniqueness across processes comes from the shard/worker fields (see worker-id leases in the cluster API).
 */
export interface GeneratorOptions {
  /** A preset name, a spec or a defined layout to make ids of (default `instagram`). */
  layout?: LayoutInput;
  /** Value of the layout's `shard` field. */
  shard?: number;
  /** Value of the layout's `worker` field. */
  worker?: number;
  /** Value of the layout's `process` field (discord). */
  process?: number;
  /** Value of the layout's `machine` field (sonyflake). */
  machine?: number;
  /** Milliseconds since the Unix epoch; defaults to Date.now. Inject one in tests. */
  clock?: () => number;
}

/** An app-side id generator for one layout and one shard or worker, as `createGenerator` returns it. */
export interface Generator {
  /** The checked layout this generator makes ids of. */
  readonly layout: Layout;
  /** The next id: strictly greater than every id this generator issued before, whatever the clock does. */
  next(): bigint;
}

/**
 * The state that makes ids monotonic: the last tick issued and the sequence used in it. `advance` is its only
 * update; it is exported so tests can drive it with chosen clock readings.
 */
export class SequenceState {
  /** The tick of the last id issued (ticks since the layout's epoch); -1 before the first. */
  lastTick = -1;
  /** The sequence value used by the last id issued within `lastTick`. */
  sequence = 0;

  constructor(
    /**
     * The largest sequence value one tick can use (the layout's sequence field max); past it, ids wait a
     * tick.
     */
    readonly sequenceMax: number,
  ) {}

  /**
   * Claims the next (tick, sequence) slot for a clock reading of `nowTick`. Returns false when the sequence of
   * the current tick is used up and the clock has not moved past it yet: the caller waits and asks again, with
   * `borrow` true once it has waited long enough, to take the next tick without the clock.
   */
  advance(nowTick: number, borrow = false): boolean {
    if (nowTick > this.lastTick) {
      this.lastTick = nowTick;
      this.sequence = 0;
      return true;
    }
    if (this.sequence < this.sequenceMax) {
      this.sequence += 1;
      return true;
    }
    if (nowTick < this.lastTick || borrow) {
      // The clock is behind the last tick issued (it stepped back), or has not moved for a whole tick of real
      // time: run ahead by one tick instead of waiting.
      this.lastTick += 1;
      this.sequence = 0;
      return true;
    }
    return false;
  }
}

/** Values of the layout's fixed fields (everything but time and sequence), validated, from the options. */
function fixedBits(layout: Layout, options: GeneratorOptions): bigint {
  let bits = 0n;
  for (const field of layout.fields) {
    if (field.kind === 'time' || field.kind === 'sequence') continue;
    const raw =
      (options as Record<string, unknown>)[field.name] ?? (options as Record<string, unknown>)[field.kind];
    bits |= fixedFieldValue(layout, field, raw) << BigInt(field.shift);
  }
  return bits;
}

function fixedFieldValue(layout: Layout, field: LayoutField, raw: unknown): bigint {
  if (raw === undefined) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `layout ${layout.name} needs a ${field.name} (0..${field.max}) to generate ids`,
    );
  }
  if (typeof raw !== 'number' || !Number.isSafeInteger(raw) || raw < 0 || BigInt(raw) > field.max) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `${field.name} ${shown(raw)} is out of range: it must be 0..${field.max}`,
    );
  }
  return BigInt(raw);
}

/**
 * Makes a generator of 64-bit ids for a layout (default `instagram`) and the shard, worker, process or machine
 * fields it names; a field the layout has must be given. Ids strictly increase per generator; a full tick waits at
 * most one tick of real time, and a clock that steps back is followed by a logical clock.
 */
export function createGenerator(options: GeneratorOptions = {}): Generator {
  optionsObject(options, 'generator options');
  if (options.clock !== undefined && typeof options.clock !== 'function') {
    throw new ShardflakeError('INVALID_ARGUMENT', 'generator option clock must be a function');
  }
  const layout = resolveLayout(options.layout ?? 'instagram');
  const sequenceField = layout.sequence;
  if (!sequenceField) {
    throw new ShardflakeError(
      'INVALID_LAYOUT',
      `layout ${layout.name} has no sequence field to generate ids with`,
    );
  }
  const clock = options.clock ?? Date.now;
  const fixed = fixedBits(layout, options);
  const state = new SequenceState(Number(sequenceField.max));
  const timeShift = BigInt(layout.time.shift);
  // The shifted sequence values are precomputed bigints, so an id costs one bigint OR with the cached
  // (tick | fixed fields) part instead of a conversion and a shift per call. Layouts with a huge sequence field
  // (more than 2^16 values) shift per call instead of holding a large table.
  const sequenceShift = BigInt(sequenceField.shift);
  const lowTable: bigint[] = [];
  if (sequenceField.max < 1n << 16n) {
    for (let s = 0n; s <= sequenceField.max; s++) lowTable.push(s << sequenceShift);
  }
  const useTable = lowTable.length > 0;
  const maxTick = Number(layout.time.max);
  let cachedTick = -1;
  let base = 0n;

  // Hot path: plain number arithmetic (ticks fit in 2^53); tickOf (bigint, with messages) only for errors.
  const epoch = layout.epoch;
  const unit = layout.timeUnitMs;
  const readTick = (): number => {
    const ms = clock();
    if (typeof ms !== 'number') {
      throw new ShardflakeError('OUT_OF_RANGE', `clock reading ${shown(ms)} is not a number of milliseconds`);
    }
    const tick = Math.floor((ms - epoch) / unit);
    if (!(tick >= 0 && tick <= maxTick)) tickOf(layout, ms); // throws OUT_OF_RANGE with a clear message
    return tick;
  };

  return {
    layout,
    next(): bigint {
      if (!state.advance(readTick())) {
        // This tick's sequence is used up: wait for the clock's next tick, but only one tick length of real time.
        const giveUpAt = performance.now() + unit;
        while (!state.advance(readTick(), performance.now() >= giveUpAt)) {}
      }
      if (state.lastTick !== cachedTick) {
        if (state.lastTick > maxTick) {
          throw new ShardflakeError('CLOCK_EXHAUSTED', `layout ${layout.name} has run out of time bits`);
        }
        cachedTick = state.lastTick;
        base = (BigInt(cachedTick) << timeShift) | fixed;
      }
      const low = useTable ? (lowTable[state.sequence] as bigint) : BigInt(state.sequence) << sequenceShift;
      return base | low;
    },
  };
}

/** The most ids one generator of this layout can issue per second: sequence values per tick / tick length. */
export function capPerSecond(layoutInput: LayoutInput): number {
  const layout = resolveLayout(layoutInput);
  if (!layout.sequence) return 0;
  return (Number(layout.sequence.max + 1n) * 1000) / layout.timeUnitMs;
}

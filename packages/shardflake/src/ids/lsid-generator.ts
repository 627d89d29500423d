import { optionsObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { LSID_FIELDS, MS_PER_DAY, TICKS_PER_DAY, TICKS_PER_MS } from './lsid-codec.js';
import { CROCKFORD_ALPHABET } from './radix.js';
import { defaultWorkerId } from './worker-id.js';

/**
 * LSID generation. The paper draws the sequence at random for every id; two ids of one worker in the same
 * 100 ns tick would then collide once in 1,024. We keep "random" as the default but make it safe:
 * - `sequence: 'random'` (default): the first id of each new tick gets a random sequence (so the ids still do
 *   not reveal how many were made), later ids in that tick count up from it;
 * - `sequence: 'monotonic'`: starts at 0 in each tick and counts up;
 * - `sequence: N`: always N (the paper's explicit form), one id per tick.
 * When a tick's sequence is used up, or the clock has not advanced (or stepped back), the generator moves its
 * own tick forward by one (100 ns) instead of waiting: ids are strictly increasing and never repeat within a
 * generator. It runs ahead of the clock only while it issues more than one id per 100 ns (or after a step
 * back, until the clock catches up), by one tick per 1,024 ids at most (one per id with an explicit sequence).
 */
export const SEQUENCE_MODES = ['random', 'monotonic'] as const;
export type SequenceMode = (typeof SEQUENCE_MODES)[number];

/**
 * Options of `lsid.createGenerator` and `lsid.generate`: the worker, how the sequence starts in a new tick, the
 * clock and how the text is written.
 */
export interface LsidGeneratorOptions {
  /** 0..1,048,575. Default: BLAKE2s of this machine's MAC (see worker-id.ts), or a random one without a MAC. */
  worker?: number;
  /** 'random' (default), 'monotonic' or a fixed number 0..1023. */
  sequence?: SequenceMode | number;
  /** Milliseconds since the Unix epoch, fractions allowed (the tick is 100 ns). Default: a high-resolution clock. */
  clock?: () => number;
  /** Random 10-bit values for the random sequence; default: the OS CSPRNG, buffered. For tests. */
  random?: () => number;
  /** Upper-case text (default lower case, as the paper's first example). */
  upper?: boolean;
  /** Hyphens between the groups (default true). */
  hyphens?: boolean;
}

/** A generator of LSIDs for one worker: each LSID greater than the one before, never waiting for the clock. */
export interface LsidGenerator {
  /**
   * The worker id every LSID of this generator carries: the option's, else derived from the MAC (random
   * without one).
   */
  readonly worker: number;
  /** The next LSID as text. */
  next(): string;
}

const SEQUENCE_MAX = LSID_FIELDS.sequence.max;

/**
 * The state that makes LSIDs strictly increasing: the last (day, tick) issued and its sequence. `advance` is
 * its only update; exported so tests can drive it with chosen clock readings.
 */
export class LsidState {
  /** The day (since 1970-01-01 UTC) of the last LSID issued; -1 before the first. */
  day = -1;
  /** The 100 ns tick within `day` of the last LSID issued; -1 before the first. */
  ticks = -1;
  /** The sequence value of the last LSID issued. */
  sequence = 0;

  /**
   * @param first the sequence a new tick starts at (drawn only when a new tick begins)
   * @param counting false for a fixed sequence: every id then needs its own tick
   */
  constructor(
    private readonly first: () => number,
    private readonly counting: boolean,
  ) {}

  /** Claims the next (day, ticks, sequence) for a clock reading. */
  advance(day: number, ticks: number): void {
    if (day > this.day || (day === this.day && ticks > this.ticks)) {
      this.day = day;
      this.ticks = ticks;
      this.sequence = this.first();
      return;
    }
    if (this.counting && this.sequence < SEQUENCE_MAX) {
      this.sequence += 1;
      return;
    }
    // Same tick used up, or the clock is behind what was issued: our own tick moves on by 100 ns.
    this.ticks += 1;
    if (this.ticks === TICKS_PER_DAY) {
      this.ticks = 0;
      this.day += 1;
    }
    this.sequence = this.first();
  }
}

/** Precomputed text of every 10-bit value (two characters), so formatting is table look-ups, not bigint work. */
function pairTable(upper: boolean): string[] {
  const table: string[] = [];
  for (let v = 0; v < 1024; v++) {
    const pair = (CROCKFORD_ALPHABET[v >> 5] as string) + (CROCKFORD_ALPHABET[v & 31] as string);
    table.push(upper ? pair : pair.toLowerCase());
  }
  return table;
}

function groupText(value: number, chars: number, upper: boolean): string {
  let out = '';
  let rest = value;
  for (let i = 0; i < chars; i++) {
    out = (CROCKFORD_ALPHABET[rest % 32] as string) + out;
    rest = Math.floor(rest / 32);
  }
  return upper ? out : out.toLowerCase();
}

/**
 * Buffered CSPRNG draws of 10 bits: one getRandomValues per 4,096 ids. Web Crypto's global rather than
 * node:crypto, whose import costs ≈ 5 ms that `shardflake/ids` would pay before making a single id.
 */
function bufferedRandom(): () => number {
  const buffer = new Uint16Array(4096);
  let at = buffer.length;
  return () => {
    if (at === buffer.length) {
      globalThis.crypto.getRandomValues(buffer);
      at = 0;
    }
    return (buffer[at++] as number) & SEQUENCE_MAX;
  };
}

/** A caller's random source (tests), whose values must be sequence values: a wrong one would print garbage. */
function checkedRandom(random: () => number): () => number {
  return () => {
    const value = random();
    if (!(Number.isSafeInteger(value) && value >= 0 && value <= SEQUENCE_MAX)) {
      throw new ShardflakeError(
        'OUT_OF_RANGE',
        `LSID random value ${shown(value)} is out of range: it must be 0..${SEQUENCE_MAX}`,
      );
    }
    return value;
  };
}

/**
 * The default clock: milliseconds within the day of `anchorDay`, from performance.now() (monotonic, sub-µs)
 * anchored to the wall clock. Reading Date.now() for every id would give only millisecond ticks. Every 4,096
 * reads it checks the wall clock and re-anchors when they drift apart by more than a millisecond (NTP steps).
 */
function highResolutionClock(): { read: () => number; anchorDay: () => number } {
  let anchorDay = 0;
  let offset = 0; // ms from anchorDay's midnight to performance.now()'s zero
  const anchor = (wallMs: number, perfMs: number) => {
    anchorDay = Math.floor(wallMs / MS_PER_DAY);
    offset = wallMs - anchorDay * MS_PER_DAY - perfMs;
  };
  anchor(performance.timeOrigin + performance.now(), performance.now());
  let reads = 0;
  return {
    read: () => {
      const perf = performance.now();
      if (++reads === 4096) {
        reads = 0;
        const wall = Date.now();
        if (Math.abs(anchorDay * MS_PER_DAY + offset + perf - wall) > 1) anchor(wall, perf);
      }
      return offset + perf;
    },
    anchorDay: () => anchorDay,
  };
}

function checkWorker(worker: unknown): number {
  const max = LSID_FIELDS.worker.max;
  if (typeof worker !== 'number' || !Number.isSafeInteger(worker) || worker < 0 || worker > max) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `LSID worker ${shown(worker)} is out of range: it must be 0..${max}`,
    );
  }
  return worker;
}

export function createLsidGenerator(options: LsidGeneratorOptions = {}): LsidGenerator {
  optionsObject(options, 'LSID generator options');
  for (const name of ['clock', 'random'] as const) {
    if (options[name] !== undefined && typeof options[name] !== 'function') {
      throw new ShardflakeError('INVALID_ARGUMENT', `LSID generator option ${name} must be a function`);
    }
  }
  const worker = options.worker === undefined ? defaultWorkerId().worker : checkWorker(options.worker);
  const mode = options.sequence ?? 'random';
  let fixed = -1;
  if (typeof mode === 'number') {
    if (!(Number.isSafeInteger(mode) && mode >= 0 && mode <= SEQUENCE_MAX)) {
      throw new ShardflakeError(
        'OUT_OF_RANGE',
        `LSID sequence ${shown(mode)} is out of range: it must be 0..${SEQUENCE_MAX}`,
      );
    }
    fixed = mode;
  } else if (!(SEQUENCE_MODES as readonly string[]).includes(mode)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `unknown LSID sequence ${shown(mode)} (a number 0..${SEQUENCE_MAX} or one of ${SEQUENCE_MODES.join(', ')})`,
    );
  }
  const random = options.random ? checkedRandom(options.random) : bufferedRandom();
  const counting = fixed < 0;
  const hyphen = options.hyphens === false ? '' : '-';
  const pairs = pairTable(options.upper === true);

  let read: () => number;
  let anchorDay: () => number;
  if (options.clock) {
    read = options.clock;
    anchorDay = () => 0;
  } else {
    ({ read, anchorDay } = highResolutionClock());
  }

  // Text pieces that change rarely: the worker group is fixed, the day group changes once a day.
  const workerText = hyphen + groupText(worker, LSID_FIELDS.worker.chars, options.upper === true) + hyphen;
  let prefixDay = -1;
  let prefix = '';
  const first = fixed >= 0 ? () => fixed : mode === 'random' ? random : () => 0;
  const state = new LsidState(first, counting);

  return {
    worker,
    next(): string {
      const ms = read();
      if (typeof ms !== 'number') {
        throw new ShardflakeError(
          'OUT_OF_RANGE',
          `clock reading ${shown(ms)} is not a number of milliseconds`,
        );
      }
      const dayInAnchor = Math.floor(ms / MS_PER_DAY);
      const ticks = Math.floor((ms - dayInAnchor * MS_PER_DAY) * TICKS_PER_MS);
      const day = anchorDay() + dayInAnchor;
      if (!(day >= 0 && day <= LSID_FIELDS.day.max && ticks >= 0)) {
        throw new ShardflakeError('OUT_OF_RANGE', `clock reading ${ms} is outside LSID's time range`);
      }
      state.advance(day, ticks);
      if (state.day !== prefixDay) {
        if (state.day > LSID_FIELDS.day.max)
          throw new ShardflakeError('CLOCK_EXHAUSTED', 'LSID has run out of days');
        prefixDay = state.day;
        prefix = groupText(prefixDay, LSID_FIELDS.day.chars, options.upper === true) + hyphen;
      }
      // 40 tick bits as four 10-bit look-ups (number arithmetic: ticks < 2^40 < 2^53).
      const t = state.ticks;
      const high = Math.floor(t / 1048576); // bits 39..20
      const low = t - high * 1048576; // bits 19..0
      return (
        prefix +
        pairs[high >> 10] +
        pairs[high & 1023] +
        pairs[low >> 10] +
        pairs[low & 1023] +
        workerText +
        pairs[state.sequence]
      );
    },
  };
}

import { expectObject, instantText, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { type Layout, type LayoutField, type LayoutSpec, resolveLayout } from './layout.js';

/**
 * Encode and decode 64-bit ids of any layout. Shifts and masks come from the layout description; nothing here
 * knows a particular layout.
 */
export type LayoutInput = string | LayoutSpec | Layout;

/** A 64-bit id taken apart by `decodeId`: the layout, the instant of its tick and every other field by name. */
export interface DecodedId {
  /** The id that was decoded, as a bigint (also when it was given as a decimal string). */
  id: bigint;
  /** The name of the layout the id was decoded with, such as `instagram`. */
  layout: string;
  /** The instant of the id's tick (start of its time unit). */
  timestamp: Date;
  /** Raw value of the time field (time units since the layout's epoch). */
  tick: bigint;
  /** Every non-time field by name: `shard`, `sequence`, `worker`, `process`, `increment`, `machine`, … */
  fields: Record<string, number>;
}

/** Parts of an id: a time (`timestamp` in ms or as a Date, or a raw `tick`) and the other fields by name. */
export interface IdParts {
  /** The id's instant, as a Date or ms since 1970, rounded down to its tick; ignored when `tick` is given. */
  timestamp?: Date | number;
  /** The raw time field (ticks since the layout's epoch), which wins over `timestamp`. */
  tick?: bigint | number;
  /** Non-time field values by name (`shard`, `sequence`, …); a field missing here and at top level is 0. */
  fields?: Record<string, number | bigint>;
  [field: string]: unknown;
}

const DECIMAL = /^(0|[1-9][0-9]*)$/;

/** A bigint, a safe integer or a decimal string → bigint; anything else → INVALID_ID. */
export function parseIdValue(id: bigint | number | string, layout?: Layout): bigint {
  let value: bigint;
  if (typeof id === 'bigint') value = id;
  else if (typeof id === 'number' && Number.isSafeInteger(id)) value = BigInt(id);
  else if (typeof id === 'string' && DECIMAL.test(id.trim())) value = BigInt(id.trim());
  else {
    throw new ShardflakeError('INVALID_ID', `${shown(id)} is not a 64-bit decimal id`);
  }
  const bits = layout?.totalBits ?? 64;
  if (value < 0n || value >> BigInt(bits) !== 0n) {
    throw new ShardflakeError(
      'INVALID_ID',
      `${value} does not fit ${layout ? `layout ${layout.name} (${bits} bits)` : 'an unsigned 64-bit id'}`,
    );
  }
  return value;
}

/** The tick (time field value) of an instant in ms; OUT_OF_RANGE before the epoch or past the time field. */
export function tickOf(layout: Layout, ms: number): bigint {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) {
    throw new ShardflakeError('OUT_OF_RANGE', `time ${shown(ms)} is not a valid date`);
  }
  const tick = BigInt(Math.floor((ms - layout.epoch) / layout.timeUnitMs));
  if (tick < 0n) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `${instantText(ms)} is before layout ${layout.name}'s epoch ${instantText(layout.epoch)}`,
    );
  }
  if (tick > layout.time.max) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `${instantText(ms)} is past the end of layout ${layout.name}'s time field (${instantText(layout.exhaustsAt.getTime())})`,
    );
  }
  return tick;
}

/** A Date or ms since 1970 → ms; any other kind of value → OUT_OF_RANGE naming the argument. */
function msOf(time: unknown, argument: string): number {
  if (time instanceof Date) return time.getTime();
  if (typeof time === 'number') return time;
  throw new ShardflakeError(
    'OUT_OF_RANGE',
    `${argument} must be a Date or milliseconds since 1970, not ${shown(time)}`,
  );
}

/** The instant (ms since the Unix epoch) at which a tick starts. */
export function msOfTick(layout: Layout, tick: bigint): number {
  return layout.epoch + Number(tick) * layout.timeUnitMs;
}

function fieldValue(field: LayoutField, raw: unknown): bigint {
  const value =
    typeof raw === 'bigint'
      ? raw
      : typeof raw === 'number' && Number.isSafeInteger(raw)
        ? BigInt(raw)
        : undefined;
  if (value === undefined || value < 0n || value > field.max) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `${field.name} ${shown(raw)} is out of range: it must be an integer from 0 to ${field.max}`,
    );
  }
  return value;
}

/** Builds an id from its parts. Fields not given are 0. */
export function encodeId(parts: IdParts, layoutInput: LayoutInput = 'instagram'): bigint {
  const layout = resolveLayout(layoutInput);
  expectObject(parts, 'encodeId: the parts of an id');
  if (parts.fields !== undefined) expectObject(parts.fields, 'encodeId: parts.fields');
  let tick: bigint;
  if (parts.tick !== undefined) tick = fieldValue(layout.time, parts.tick);
  else if (parts.timestamp !== undefined) {
    tick = tickOf(layout, msOf(parts.timestamp, 'encodeId: parts.timestamp'));
  } else throw new ShardflakeError('INVALID_ARGUMENT', 'encodeId needs a timestamp or a tick');
  let id = tick << BigInt(layout.time.shift);
  for (const field of layout.fields) {
    if (field === layout.time) continue;
    const raw = parts.fields?.[field.name] ?? parts[field.name];
    if (raw === undefined) continue;
    id |= fieldValue(field, raw) << BigInt(field.shift);
  }
  return id;
}

/** Splits an id into its fields. Accepts a bigint or a decimal string. */
export function decodeId(
  idInput: bigint | number | string,
  layoutInput: LayoutInput = 'instagram',
): DecodedId {
  const layout = resolveLayout(layoutInput);
  const id = parseIdValue(idInput, layout);
  const tick = (id >> BigInt(layout.time.shift)) & layout.time.max;
  const fields: Record<string, number> = {};
  for (const field of layout.fields) {
    if (field === layout.time) continue;
    fields[field.name] = Number((id >> BigInt(field.shift)) & field.max);
  }
  return { id, layout: layout.name, timestamp: new Date(msOfTick(layout, tick)), tick, fields };
}

/**
 * The smallest and largest id whose time lies in [from, to] (both inclusive, to the layout's time unit), for
 * `WHERE id BETWEEN min AND max` and keyset pagination by time.
 */
export function idRange(
  from: Date | number,
  to: Date | number,
  layoutInput: LayoutInput = 'instagram',
): {
  /** The first id of `from`'s tick: its time field with every lower bit zero. */
  min: bigint;
  /** The last id of `to`'s tick: its time field with every lower bit one. */
  max: bigint;
} {
  const layout = resolveLayout(layoutInput);
  const fromTick = tickOf(layout, msOf(from, 'idRange: from'));
  const toTick = tickOf(layout, msOf(to, 'idRange: to'));
  if (toTick < fromTick) throw new ShardflakeError('INVALID_ARGUMENT', 'idRange: `to` is before `from`');
  const timeShift = BigInt(layout.time.shift);
  const lowBits = (1n << timeShift) - 1n;
  return { min: fromTick << timeShift, max: (toTick << timeShift) | lowBits };
}

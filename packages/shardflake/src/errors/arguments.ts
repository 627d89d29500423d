import { type ErrorCode, ShardflakeError } from './errors.js';

/**
 * Checks of the kind of value a public function was given. TypeScript's types bind TypeScript callers only: a
 * JavaScript caller, a parsed JSON document or a test double can hand any function any value, and the raw
 * TypeError or RangeError that then comes from deep inside names neither the argument nor what it should be.
 * These turn that into a ShardflakeError whose message does, and describe values for messages without ever
 * throwing themselves (String() throws for symbols inside templates and for objects without a prototype).
 */

/** The kind of a value, for a message: `a number`, `a bigint`, `an array`, `null`, `an object`, … */
export function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (Array.isArray(value)) return 'an array';
  if (value instanceof Date) return 'a Date';
  if (value instanceof Uint8Array) return 'bytes';
  const type = typeof value;
  return type === 'object' ? 'an object' : `${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}`;
}

/** A short printable form of any value: text quoted, numbers and bigints as written, otherwise its kind. */
export function shown(value: unknown, max = 60): string {
  if (typeof value === 'string') return JSON.stringify(value).slice(0, max);
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return String(value);
  return kindOf(value);
}

/** `value` when it is a string; otherwise a ShardflakeError that names `argument`. */
export function expectString(value: unknown, argument: string, code: ErrorCode = 'INVALID_ARGUMENT'): string {
  if (typeof value !== 'string')
    throw new ShardflakeError(code, `${argument} must be a string, not ${kindOf(value)}`);
  return value;
}

/** `value` when it is a plain object (not null, not an array); otherwise a ShardflakeError naming `argument`. */
export function expectObject(
  value: unknown,
  argument: string,
  code: ErrorCode = 'INVALID_ARGUMENT',
): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ShardflakeError(code, `${argument} must be an object, not ${kindOf(value)}`);
  }
  return value as Record<string, unknown>;
}

/** `value` when it is undefined or an array; otherwise a ShardflakeError naming `argument`. */
export function expectArray(value: unknown, argument: string): readonly unknown[] | undefined {
  if (value !== undefined && !Array.isArray(value))
    throw new ShardflakeError('INVALID_ARGUMENT', `${argument} must be an array, not ${kindOf(value)}`);
  return value;
}

/** Options objects: `undefined` means none; anything else must be an object. */
export function optionsObject(value: unknown, argument: string): Record<string, unknown> {
  return value === undefined ? {} : expectObject(value, argument);
}

/** An instant for a message: ISO 8601 when `Date` can hold it, else the number of milliseconds. */
export function instantText(ms: number): string {
  return Number.isFinite(ms) && Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : `${ms} ms since 1970`;
}

/**
 * `value` when it is undefined or a whole number of at least `min`; otherwise INVALID_ARGUMENT naming `argument`.
 * For counts and durations in options, where `'10'`, `NaN` or `-1` would otherwise reach a pool or a timer; `max`
 * for a count that goes on the wire in a field of fixed width.
 */
export function expectWholeNumber(
  value: unknown,
  argument: string,
  min: number,
  max = Number.POSITIVE_INFINITY,
): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `${argument} must be a whole number ${max === Number.POSITIVE_INFINITY ? `of at least ${min}` : `from ${min} to ${max}`}, not ${shown(value)}`,
    );
  return value;
}

/**
 * Node's timers hold at most 2^31 - 1 ms (≈ 24.8 days); a longer delay fires after 1 ms with only a warning, so a
 * huge timeout would act as almost none.
 */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * A whole-number option checked by its unit, read from its name: `…Ms` and `…Seconds` are durations that end up
 * in a timer, so they stop at what a timer holds; anything else is a count with no upper bound.
 */
export function expectOption(value: unknown, argument: string, min: number): number | undefined {
  const max = argument.endsWith('Ms')
    ? MAX_TIMER_MS
    : argument.endsWith('Seconds')
      ? Math.floor(MAX_TIMER_MS / 1000)
      : Number.POSITIVE_INFINITY;
  return expectWholeNumber(value, argument, min, max);
}

/** `value` when it is undefined or of the `typeof` given; otherwise INVALID_ARGUMENT naming `argument`. */
export function expectKind(value: unknown, argument: string, kind: 'boolean' | 'function'): void {
  if (value !== undefined && typeof value !== kind)
    throw new ShardflakeError('INVALID_ARGUMENT', `${argument} must be a ${kind}, not ${kindOf(value)}`);
}

import { unsupported } from './refuse.js';

/**
 * Exact decimal arithmetic for combining partial aggregates of PostgreSQL `numeric` (and int8, which sums to
 * numeric): a value is `units / 10^scale`, with `scale` the display scale PostgreSQL keeps (`1.50` has scale 2).
 * Adding keeps the larger scale, as PostgreSQL's numeric addition does, so the sum of the shards' sums prints
 * exactly as the sum over one table would.
 */
export interface Decimal {
  units: bigint;
  scale: number;
}

export function parseDecimal(text: string): Decimal {
  if (text === 'NaN' || text.endsWith('Infinity')) unsupported(`combining the numeric value ${text}`);
  const negative = text.startsWith('-');
  const digits = negative || text.startsWith('+') ? text.slice(1) : text;
  const exponentAt = digits.search(/[eE]/);
  const mantissa = exponentAt === -1 ? digits : digits.slice(0, exponentAt);
  const exponent = exponentAt === -1 ? 0 : Number(digits.slice(exponentAt + 1));
  const point = mantissa.indexOf('.');
  const whole = point === -1 ? mantissa : mantissa.slice(0, point);
  const fraction = point === -1 ? '' : mantissa.slice(point + 1);
  let units = BigInt(`${whole}${fraction}` || '0');
  let scale = fraction.length - exponent;
  if (scale < 0) {
    units *= 10n ** BigInt(-scale);
    scale = 0;
  }
  return { units: negative ? -units : units, scale };
}

function rescale(value: Decimal, scale: number): bigint {
  return value.units * 10n ** BigInt(scale - value.scale);
}

export function addDecimal(a: Decimal, b: Decimal): Decimal {
  const scale = Math.max(a.scale, b.scale);
  return { units: rescale(a, scale) + rescale(b, scale), scale };
}

export function compareDecimal(a: Decimal, b: Decimal): number {
  const scale = Math.max(a.scale, b.scale);
  const x = rescale(a, scale);
  const y = rescale(b, scale);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Prints as PostgreSQL does: all `scale` digits after the point, none for scale 0. */
export function formatDecimal(value: Decimal): string {
  const negative = value.units < 0n;
  const digits = (negative ? -value.units : value.units).toString().padStart(value.scale + 1, '0');
  const whole = digits.slice(0, digits.length - value.scale);
  const fraction = digits.slice(digits.length - value.scale);
  return `${negative ? '-' : ''}${whole}${value.scale > 0 ? `.${fraction}` : ''}`;
}

/** The value without trailing zeros: equal numerics (1.0 and 1.00) get the same key. */
export function decimalKey(text: string): string {
  const value = parseDecimal(text);
  let { units, scale } = value;
  while (scale > 0 && units % 10n === 0n) {
    units /= 10n;
    scale--;
  }
  return formatDecimal({ units, scale });
}

const NBASE_DIGITS = 4; // PostgreSQL stores numerics in base 10,000 digits
const MIN_SIG_DIGITS = 16; // NUMERIC_MIN_SIG_DIGITS
const MAX_DISPLAY_SCALE = 1000; // NUMERIC_MAX_DISPLAY_SCALE

/** PostgreSQL's weight (position of the first non-zero base-10,000 digit) and that digit, of a non-negative value. */
function weightAndFirstDigit(value: Decimal): { weight: number; first: bigint } {
  const units = value.units < 0n ? -value.units : value.units;
  if (units === 0n) return { weight: 0, first: 0n };
  const exponent = units.toString().length - 1 - value.scale; // value in [10^exponent, 10^(exponent+1))
  const weight = Math.floor(exponent / NBASE_DIGITS);
  const shift = value.scale + weight * NBASE_DIGITS; // first = floor(value / 10000^weight) = units / 10^shift
  const first = shift >= 0 ? units / 10n ** BigInt(shift) : units * 10n ** BigInt(-shift);
  return { weight, first };
}

/**
 * `sum / count` as PostgreSQL's avg computes it for integer and numeric input (numeric_div): the result scale
 * from select_div_scale (at least 16 significant digits, never less than the sum's own scale), rounded half away
 * from zero. Proved against the server by the property test in test/sql.
 */
export function averageDecimal(sum: Decimal, count: bigint): Decimal {
  const n: Decimal = { units: count, scale: 0 };
  const a = weightAndFirstDigit(sum);
  const b = weightAndFirstDigit(n);
  let quotientWeight = a.weight - b.weight;
  if (a.first <= b.first) quotientWeight--;
  let scale = MIN_SIG_DIGITS - quotientWeight * NBASE_DIGITS;
  scale = Math.min(Math.max(scale, sum.scale, 0), MAX_DISPLAY_SCALE);
  // units / 10^sum.scale / count, to `scale` digits: (units * 10^(scale - sum.scale)) / count, rounded.
  let numerator = sum.units;
  let denominator = count;
  if (scale >= sum.scale) numerator *= 10n ** BigInt(scale - sum.scale);
  else denominator *= 10n ** BigInt(sum.scale - scale);
  const negative = numerator < 0n;
  const magnitude = negative ? -numerator : numerator;
  let quotient = magnitude / denominator;
  if ((magnitude % denominator) * 2n >= denominator) quotient++;
  return { units: negative ? -quotient : quotient, scale };
}

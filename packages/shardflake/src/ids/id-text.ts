import { expectString, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { parseIdValue } from './codec.js';
import {
  base62Width,
  crockfordWidth,
  decodeBase62,
  decodeCrockford,
  encodeBase62,
  encodeCrockford,
} from './radix.js';

/**
 * Text forms of a 64-bit id. All three keep sort order at their fixed width: decimal only when compared as
 * numbers, base62 (11 characters) and Crockford base32 (13 characters) also when compared as plain strings —
 * what a URL slug or a text column needs.
 */
export const ID_ENCODINGS = ['decimal', 'base62', 'base32'] as const;
/**
 * A text form of a 64-bit id: decimal, base62 (11 characters) or Crockford base32 (13 characters), both fixed-width
 * so that they sort like the numbers.
 */
export type IdEncoding = (typeof ID_ENCODINGS)[number];

const ID_BITS = 64;
const BASE62_WIDTH = base62Width(ID_BITS);
const BASE32_WIDTH = crockfordWidth(ID_BITS);

export function assertIdEncoding(value: string): IdEncoding {
  if (!(ID_ENCODINGS as readonly string[]).includes(value)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `unknown encoding ${shown(value)} (one of ${ID_ENCODINGS.join(', ')})`,
    );
  }
  return value as IdEncoding;
}

/** A 64-bit id → its text in the chosen encoding. */
export function formatId(id: bigint, encoding: IdEncoding = 'decimal'): string {
  assertIdEncoding(encoding);
  const value = parseIdValue(id);
  if (encoding === 'base62') return encodeBase62(value, BASE62_WIDTH);
  if (encoding === 'base32') return encodeCrockford(value, BASE32_WIDTH);
  return value.toString();
}

/** Text in the chosen encoding → the 64-bit id. Wrong width or characters → INVALID_ID. */
export function parseId(text: string, encoding: IdEncoding = 'decimal'): bigint {
  assertIdEncoding(encoding);
  expectString(text, 'parseId: the text of an id', 'INVALID_ID');
  if (encoding === 'decimal') return parseIdValue(text);
  const width = encoding === 'base62' ? BASE62_WIDTH : BASE32_WIDTH;
  if (text.length !== width) {
    throw new ShardflakeError(
      'INVALID_ID',
      `${JSON.stringify(text).slice(0, 60)} is not a ${encoding} id: it must be exactly ${width} characters`,
    );
  }
  const value = encoding === 'base62' ? decodeBase62(text, 'base62 id') : decodeCrockford(text, 'base32 id');
  // Both widths hold more than 64 bits (62^11 ≈ 2^65.5, 13 × 5 = 65), so valid-looking text can still overflow.
  if (value >> BigInt(ID_BITS) !== 0n) {
    throw new ShardflakeError(
      'INVALID_ID',
      `${JSON.stringify(text)} is ${encoding} for ${value}, more than a 64-bit id holds (at most 2^64 − 1)`,
    );
  }
  return value;
}

const DIGITS = /^[0-9]+$/;

/**
 * The text form a string looks like, by shape alone (its characters are checked when it is parsed): digits only
 * → decimal, 11 characters → base62, 13 characters → base32; anything else → undefined. The two fixed widths
 * are why the forms can be told apart: no other length could be a base62 or base32 id. A string of 11 or 13
 * digits could be either a decimal id or a base62/base32 one that happens to hold no letters; digits-only text
 * is always read as decimal (a caller that knows better names the encoding), because decimal is the form people
 * paste and Postgres prints.
 */
export function detectEncoding(text: string): IdEncoding | undefined {
  if (DIGITS.test(text)) return 'decimal';
  if (text.length === BASE62_WIDTH) return 'base62';
  if (text.length === BASE32_WIDTH) return 'base32';
  return undefined;
}

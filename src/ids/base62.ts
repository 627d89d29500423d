import { ShardflakeError } from '../errors.js';

/**
 * Base62 for short URL-safe ids. The alphabet is in ASCII order (digits, upper case, lower case), so text of a
 * fixed width sorts byte-wise exactly like the number it encodes — unlike the common 0-9a-zA-Z alphabets, which
 * break sort order. 64-bit ids use 11 characters (62^11 > 2^64). Case-sensitive by nature.
 */
export const BASE62_ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const BASE = 62n;

const DECODE = new Int8Array(128).fill(-1);
for (let i = 0; i < BASE62_ALPHABET.length; i++) DECODE[BASE62_ALPHABET.charCodeAt(i)] = i;

/** Characters needed to write every value of `bits` bits. */
export function base62Width(bits: number): number {
  let width = 0;
  for (let capacity = 1n; capacity < 1n << BigInt(bits); capacity *= BASE) width++;
  return width;
}

/** A non-negative bigint → exactly `width` base62 characters, zero-padded on the left. */
export function encodeBase62(value: bigint, width = base62Width(64)): string {
  if (value < 0n || value >= BASE ** BigInt(width)) {
    throw new ShardflakeError('OUT_OF_RANGE', `${value} does not fit ${width} base62 characters`);
  }
  let out = '';
  let rest = value;
  for (let i = 0; i < width; i++) {
    out = BASE62_ALPHABET[Number(rest % BASE)] + out;
    rest /= BASE;
  }
  return out;
}

/** Base62 text → bigint; any character outside the alphabet is an INVALID_ID. */
export function decodeBase62(text: string, what = 'base62 text'): bigint {
  if (text.length === 0) throw new ShardflakeError('INVALID_ID', `empty ${what}`);
  let value = 0n;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const digit = code < 128 ? (DECODE[code] as number) : -1;
    if (digit < 0) {
      throw new ShardflakeError(
        'INVALID_ID',
        `${JSON.stringify(text).slice(0, 60)} is not valid ${what}: character ${JSON.stringify(text[i])} at position ${i + 1}`,
      );
    }
    value = value * BASE + BigInt(digit);
  }
  return value;
}

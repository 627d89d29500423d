import { ShardflakeError } from '../errors.js';

/**
 * Crockford's Base32 (https://www.crockford.com/base32.html): digits and upper-case letters without I, L, O, U,
 * 5 bits a character. Written at a fixed width, the text sorts like the number (the alphabet is in ASCII order).
 * Decoding is case-insensitive and forgiving the way Crockford specifies: I and L read as 1, O reads as 0.
 * U (and every other character) is rejected. LSID and the 64-bit ids' base32 text both use this module.
 */
export const CROCKFORD_ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
export const CROCKFORD_BITS_PER_CHAR = 5;

/** Character code → 5-bit value, or −1 for a character Crockford's Base32 does not allow. */
const DECODE = new Int8Array(128).fill(-1);
for (let i = 0; i < CROCKFORD_ALPHABET.length; i++) {
  const upper = CROCKFORD_ALPHABET.charCodeAt(i);
  DECODE[upper] = i;
  DECODE[String.fromCharCode(upper).toLowerCase().charCodeAt(0)] = i;
}
for (const [alias, value] of [
  ['I', 1],
  ['L', 1],
  ['O', 0],
] as const) {
  DECODE[alias.charCodeAt(0)] = value;
  DECODE[alias.toLowerCase().charCodeAt(0)] = value;
}

/** Number of characters needed for `bits` bits. */
export function crockfordWidth(bits: number): number {
  return Math.ceil(bits / CROCKFORD_BITS_PER_CHAR);
}

/** A non-negative bigint → exactly `width` characters (upper case), zero-padded on the left. */
export function encodeCrockford(value: bigint, width: number): string {
  if (value < 0n || value >> BigInt(width * CROCKFORD_BITS_PER_CHAR) !== 0n) {
    throw new ShardflakeError('OUT_OF_RANGE', `${value} does not fit ${width} Crockford base32 characters`);
  }
  let out = '';
  let rest = value;
  for (let i = 0; i < width; i++) {
    out = CROCKFORD_ALPHABET[Number(rest & 31n)] + out;
    rest >>= 5n;
  }
  return out;
}

/**
 * Crockford text → bigint. Case-insensitive, I/L → 1, O → 0; every other character (U, hyphens, spaces, …)
 * is an INVALID_ID. `what` names the format in the error message.
 */
export function decodeCrockford(text: string, what = 'Crockford base32 text'): bigint {
  if (text.length === 0) throw new ShardflakeError('INVALID_ID', `empty ${what}`);
  let value = 0n;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const digit = code < 128 ? (DECODE[code] as number) : -1;
    if (digit < 0) {
      throw new ShardflakeError(
        'INVALID_ID',
        `${JSON.stringify(text).slice(0, 60)} is not valid ${what}: character ${JSON.stringify(text[i])} at position ${i + 1} is not in Crockford's Base32`,
      );
    }
    value = (value << 5n) | BigInt(digit);
  }
  return value;
}

/** True when every character is one Crockford decoding accepts (including the I/L/O aliases). */
export function isCrockford(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code >= 128 || (DECODE[code] as number) < 0) return false;
  }
  return text.length > 0;
}

/** 5-bit value → its character; exposed for encoders that build text from precomputed pieces (LSID). */
export function crockfordDigit(value: number): string {
  return CROCKFORD_ALPHABET[value & 31] as string;
}

import { ShardflakeError } from '../errors/errors.js';

/**
 * Fixed-width positional text for non-negative bigints, over an alphabet in ASCII order — so that text of one
 * width sorts byte-wise exactly like the numbers it encodes; and its two instances, base62 and Crockford's
 * Base32, below. (One module for the three: every module `shardflake/ids` loads costs its import ≈ 0.5 ms of
 * Node's loader, more than their code.)
 */
export interface RadixSpec {
  /** Name used in error messages ("base62", "Crockford base32"). */
  name: string;
  /** Digits in ascending value and ascending ASCII order. */
  alphabet: string;
  /** Also accept the lower-case form of each letter. */
  caseInsensitive?: boolean;
  /** Extra characters accepted when decoding, with the value they read as (Crockford: I/L → 1, O → 0). */
  aliases?: Readonly<Record<string, number>>;
}

export interface Radix {
  readonly alphabet: string;
  /** Characters needed to write every value of `bits` bits. */
  width(bits: number): number;
  /** A non-negative bigint → exactly `width` characters, zero-padded on the left; OUT_OF_RANGE if it does not fit. */
  encode(value: bigint, width: number): string;
  /** Text → bigint; any character outside the alphabet (and aliases) is an INVALID_ID naming it. */
  decode(text: string, what?: string): bigint;
  /** True when every character decodes. */
  accepts(text: string): boolean;
}

export function createRadix(spec: RadixSpec): Radix {
  const base = BigInt(spec.alphabet.length);
  const decodeTable = new Int8Array(128).fill(-1);
  const accept = (char: string, value: number) => {
    decodeTable[char.charCodeAt(0)] = value;
    if (spec.caseInsensitive) decodeTable[char.toLowerCase().charCodeAt(0)] = value;
  };
  [...spec.alphabet].forEach(accept);
  for (const [alias, value] of Object.entries(spec.aliases ?? {})) accept(alias, value);
  const digitOf = (code: number) => (code < 128 ? (decodeTable[code] as number) : -1);

  return {
    alphabet: spec.alphabet,
    width(bits) {
      let width = 0;
      for (let capacity = 1n; capacity < 1n << BigInt(bits); capacity *= base) width++;
      return width;
    },
    encode(value, width) {
      if (value < 0n || value >= base ** BigInt(width)) {
        throw new ShardflakeError('OUT_OF_RANGE', `${value} does not fit ${width} ${spec.name} characters`);
      }
      let out = '';
      let rest = value;
      for (let i = 0; i < width; i++) {
        out = spec.alphabet[Number(rest % base)] + out;
        rest /= base;
      }
      return out;
    },
    decode(text, what = `${spec.name} text`) {
      if (text.length === 0) throw new ShardflakeError('INVALID_ID', `empty ${what}`);
      let value = 0n;
      for (let i = 0; i < text.length; i++) {
        const digit = digitOf(text.charCodeAt(i));
        if (digit < 0) {
          throw new ShardflakeError(
            'INVALID_ID',
            `${JSON.stringify(text).slice(0, 60)} is not valid ${what}: character ${JSON.stringify(text[i])} at position ${i + 1} is not in ${spec.name}`,
          );
        }
        value = value * base + BigInt(digit);
      }
      return value;
    },
    accepts(text) {
      for (let i = 0; i < text.length; i++) if (digitOf(text.charCodeAt(i)) < 0) return false;
      return text.length > 0;
    },
  };
}

/**
 * Base62 for short URL-safe ids. The alphabet is in ASCII order (digits, upper case, lower case), so text of a
 * fixed width sorts byte-wise exactly like the number it encodes — unlike the common 0-9a-zA-Z alphabets, which
 * break sort order. 64-bit ids use 11 characters (62^11 > 2^64). Case-sensitive by nature.
 */
export const BASE62_ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

const base62 = createRadix({ name: 'base62', alphabet: BASE62_ALPHABET });

/** Characters needed to write every value of `bits` bits. */
export const base62Width = (bits: number): number => base62.width(bits);

/** A non-negative bigint → exactly `width` base62 characters, zero-padded on the left. */
export const encodeBase62 = (value: bigint, width = base62.width(64)): string => base62.encode(value, width);

/** Base62 text → bigint; any character outside the alphabet is an INVALID_ID. */
export const decodeBase62 = (text: string, what = 'base62 text'): bigint => base62.decode(text, what);

/**
 * Crockford's Base32 (https://www.crockford.com/base32.html): digits and upper-case letters without I, L, O, U,
 * 5 bits a character. Written at a fixed width, the text sorts like the number (the alphabet is in ASCII order).
 * Decoding is case-insensitive and forgiving the way Crockford specifies: I and L read as 1, O reads as 0.
 * U (and every other character) is rejected. LSID and the 64-bit ids' base32 text both use this module.
 */
export const CROCKFORD_ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
export const CROCKFORD_BITS_PER_CHAR = 5;

const crockford = createRadix({
  name: "Crockford's Base32",
  alphabet: CROCKFORD_ALPHABET,
  caseInsensitive: true,
  aliases: { I: 1, L: 1, O: 0 },
});

/** Number of characters needed for `bits` bits. */
export function crockfordWidth(bits: number): number {
  return Math.ceil(bits / CROCKFORD_BITS_PER_CHAR);
}

/** A non-negative bigint → exactly `width` characters (upper case), zero-padded on the left. */
export const encodeCrockford = (value: bigint, width: number): string => crockford.encode(value, width);

/**
 * Crockford text → bigint. Case-insensitive, I/L → 1, O → 0; every other character (U, hyphens, spaces, …)
 * is an INVALID_ID. `what` names the format in the error message.
 */
export const decodeCrockford = (text: string, what = 'Crockford base32 text'): bigint =>
  crockford.decode(text, what);

/** True when every character is one Crockford decoding accepts (including the I/L/O aliases). */
export const isCrockford = (text: string): boolean => crockford.accepts(text);

/** 5-bit value → its character; exposed for encoders that build text from precomputed pieces (LSID). */
export function crockfordDigit(value: number): string {
  return CROCKFORD_ALPHABET[value & 31] as string;
}

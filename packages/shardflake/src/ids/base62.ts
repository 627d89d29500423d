import { createRadix } from './radix.js';

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

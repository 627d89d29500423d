import { createRadix } from './radix.js';

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

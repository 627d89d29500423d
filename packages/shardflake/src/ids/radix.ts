import { ShardflakeError } from '../errors/errors.js';

/**
 * Fixed-width positional text for non-negative bigints, over an alphabet in ASCII order — so that text of one
 * width sorts byte-wise exactly like the numbers it encodes. base62.ts and crockford.ts are two instances.
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

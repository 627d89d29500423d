import { CROCKFORD_BITS_PER_CHAR } from './radix.js';

/**
 * LSID's bit layout (seed 002), written once as data: 95 bits, most significant first, each field a whole
 * number of Crockford characters, so that the text groups `ddddd-tttttttt-wwww-ss` are exactly the fields.
 *   day      25 bits  days since 1970-01-01 (UTC)                    5 characters
 *   ticks    40 bits  100 ns ticks since that day's UTC midnight      8 characters
 *   worker   20 bits  worker id (BLAKE2s of the MAC by default)       4 characters
 *   sequence 10 bits  random at each new tick by default             2 characters
 */
export const LSID_FIELD_SPECS = [
  { name: 'day', bits: 25 },
  { name: 'ticks', bits: 40 },
  { name: 'worker', bits: 20 },
  { name: 'sequence', bits: 10 },
] as const;

export type LsidFieldName = (typeof LSID_FIELD_SPECS)[number]['name'];

export interface LsidField {
  readonly name: LsidFieldName;
  readonly bits: number;
  readonly shift: number;
  readonly max: number;
  /** Characters of this field's group in the text form. */
  readonly chars: number;
  /** Offset of the group in the 19-character text without hyphens. */
  readonly charOffset: number;
}

export const LSID_BITS = LSID_FIELD_SPECS.reduce((sum, f) => sum + f.bits, 0);
/** The binary form rounds the 95 bits up to whole bytes; the top bit is always 0. */
export const LSID_BYTES = Math.ceil(LSID_BITS / 8);
export const LSID_CHARS = LSID_BITS / CROCKFORD_BITS_PER_CHAR;
/** 19 characters plus a hyphen between groups. */
export const LSID_TEXT_LENGTH = LSID_CHARS + LSID_FIELD_SPECS.length - 1;

export const LSID_FIELDS: Record<LsidFieldName, LsidField> = (() => {
  let shift = LSID_BITS;
  let charOffset = 0;
  const out = {} as Record<LsidFieldName, LsidField>;
  for (const spec of LSID_FIELD_SPECS) {
    shift -= spec.bits;
    const chars = spec.bits / CROCKFORD_BITS_PER_CHAR;
    out[spec.name] = Object.freeze({ ...spec, shift, max: 2 ** spec.bits - 1, chars, charOffset });
    charOffset += chars;
  }
  return Object.freeze(out);
})();

export const MS_PER_DAY = 86_400_000;
/** 100 ns ticks in one millisecond and in one day. */
export const TICKS_PER_MS = 10_000;
export const TICKS_PER_DAY = MS_PER_DAY * TICKS_PER_MS;

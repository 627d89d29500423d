import { expectObject, kindOf, optionsObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { CROCKFORD_BITS_PER_CHAR, decodeCrockford, encodeCrockford, isCrockford } from './radix.js';

// LSID's layout and its codec share this module: `shardflake/ids` loads both anyway, and each module it loads
// costs its import ≈ 0.5 ms of Node's loader (more on a slow file system), more than the code in it.

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

// The codec.

/** An LSID's fields. `ticks` (< 8.64e11) and every other field fit a JS number exactly. */
export interface LsidParts {
  /** Days since 1970-01-01 UTC (25 bits). */
  day: number;
  /** 100 ns ticks since that day's UTC midnight, below 864,000,000,000 (40 bits). */
  ticks: number;
  /** The worker id, 0 to 1,048,575 (20 bits); by default derived from the machine's MAC. */
  worker: number;
  /** 0 to 1023 (10 bits): random at each new tick by default, then counting up within the tick. */
  sequence: number;
}

export interface DecodedLsid extends LsidParts {
  /** The 95-bit value; LSIDs compare like these numbers. */
  value: bigint;
  /** The instant, to the millisecond (a Date holds no more). */
  timestamp: Date;
  /** The instant to the full 100 ns: `2022-10-28T09:26:37.1234567Z`. */
  time: string;
}

/** An LSID as the `lsid` functions take it: its text, its 95-bit value, or its fields. */
export type LsidInput = string | bigint | LsidParts;

/** How `lsid.format` writes an LSID: the letters' case and whether the groups are separated by hyphens. */
export interface FormatOptions {
  /** Upper-case letters (the paper's second example). Default false: lower case, like its first. */
  upper?: boolean;
  /** Hyphens between the groups (22 characters). Default true; without them 19 characters. */
  hyphens?: boolean;
}

function invalid(input: unknown, reason: string): ShardflakeError {
  return new ShardflakeError(
    'INVALID_ID',
    `${typeof input === 'string' ? shown(input) : kindOf(input)} is not an LSID: ${reason}`,
  );
}

function checkField(name: LsidFieldName, value: number): void {
  const max = name === 'ticks' ? TICKS_PER_DAY - 1 : LSID_FIELDS[name].max;
  if (!(Number.isSafeInteger(value) && value >= 0 && value <= max)) {
    throw new ShardflakeError(
      'OUT_OF_RANGE',
      `LSID ${name} ${shown(value)} is out of range: it must be 0..${max}`,
    );
  }
}

/** Fields → the 95-bit value. Ticks must lie inside the day (< 864,000,000,000). */
export function encodeLsid(parts: LsidParts): bigint {
  expectObject(parts, 'the fields of an LSID');
  let value = 0n;
  for (const spec of LSID_FIELD_SPECS) {
    const v = parts[spec.name];
    checkField(spec.name, v);
    value |= BigInt(v) << BigInt(LSID_FIELDS[spec.name].shift);
  }
  return value;
}

/** The 95-bit value → fields and time. A tick count past the end of its day is INVALID_ID. */
export function decodeLsid(value: bigint, input: unknown = value): DecodedLsid {
  if (typeof value !== 'bigint') throw invalid(value, 'its value must be a bigint');
  if (value < 0n || value >> BigInt(LSID_BITS) !== 0n)
    throw invalid(input, `it does not fit ${LSID_BITS} bits`);
  const field = (name: LsidFieldName) => {
    const f = LSID_FIELDS[name];
    return Number((value >> BigInt(f.shift)) & BigInt(f.max));
  };
  const day = field('day');
  const ticks = field('ticks');
  if (ticks >= TICKS_PER_DAY) throw invalid(input, `its tick count ${ticks} is past the end of a day`);
  const msInDay = Math.floor(ticks / TICKS_PER_MS);
  const timestamp = new Date(day * MS_PER_DAY + msInDay);
  const subMs = String(ticks % TICKS_PER_MS).padStart(4, '0');
  const time = Number.isNaN(timestamp.getTime())
    ? `day ${day} + ${ticks} × 100 ns`
    : `${timestamp.toISOString().slice(0, -1)}${subMs}Z`;
  return { value, day, ticks, worker: field('worker'), sequence: field('sequence'), timestamp, time };
}

/** Text → value, with the paper's rules: case-insensitive, Crockford aliases, hyphens only between groups. */
export function parseLsid(text: string): DecodedLsid {
  if (typeof text !== 'string') throw invalid(text, 'not a string');
  let digits: string;
  if (text.length === LSID_TEXT_LENGTH) {
    digits = '';
    let at = 0;
    for (const spec of LSID_FIELD_SPECS) {
      const { chars } = LSID_FIELDS[spec.name];
      if (at > 0) {
        if (text[at] !== '-')
          throw invalid(text, 'hyphens belong after characters 5, 13 and 17 (ddddd-tttttttt-wwww-ss)');
        at++;
      }
      digits += text.slice(at, at + chars);
      at += chars;
    }
  } else if (text.length === LSID_CHARS) {
    digits = text;
  } else {
    throw invalid(text, `it must be ${LSID_TEXT_LENGTH} characters with hyphens or ${LSID_CHARS} without`);
  }
  if (digits.includes('-'))
    throw invalid(text, 'hyphens belong after characters 5, 13 and 17 (ddddd-tttttttt-wwww-ss)');
  let value: bigint;
  try {
    value = decodeCrockford(digits, 'LSID text');
  } catch {
    const bad = [...digits].find((c) => !isCrockford(c));
    throw invalid(
      text,
      `${JSON.stringify(bad)} is not a Crockford base32 character (U is not allowed either)`,
    );
  }
  return decodeLsid(value, text);
}

/** Any accepted input (text, 95-bit value, fields) → its value. */
export function lsidValue(input: LsidInput): bigint {
  if (typeof input === 'string') return parseLsid(input).value;
  if (typeof input === 'bigint') return decodeLsid(input).value;
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw invalid(input, 'an LSID is its text, its 95-bit value as a bigint, or its fields');
  }
  return encodeLsid(input);
}

/** Value or fields → text, `00jtx-04fecrkm-0cgm-3n` by default. */
export function formatLsid(input: LsidInput, options: FormatOptions = {}): string {
  optionsObject(options, 'lsid.format: options');
  const value = lsidValue(input);
  const groups = LSID_FIELD_SPECS.map((spec) => {
    const f = LSID_FIELDS[spec.name];
    return encodeCrockford((value >> BigInt(f.shift)) & BigInt(f.max), f.chars);
  });
  const text = groups.join(options.hyphens === false ? '' : '-');
  return options.upper ? text : text.toLowerCase();
}

/** −1, 0 or 1: LSIDs order by their value, which is also the order of their text at equal case and hyphenation. */
export function compareLsid(a: LsidInput, b: LsidInput): -1 | 0 | 1 {
  const x = lsidValue(a);
  const y = lsidValue(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** 12 bytes, big-endian; the top bit is always 0 (96 bits hold the 95). Sorts byte-wise like the LSID. */
export function lsidToBytes(input: LsidInput): Uint8Array {
  let value = lsidValue(input);
  const bytes = new Uint8Array(LSID_BYTES);
  for (let i = LSID_BYTES - 1; i >= 0; i--) {
    bytes[i] = Number(value & 0xffn);
    value >>= 8n;
  }
  return bytes;
}

export function lsidFromBytes(bytes: Uint8Array): DecodedLsid {
  if (!(bytes instanceof Uint8Array) || bytes.length !== LSID_BYTES) {
    throw invalid(`${bytes?.length ?? 0} bytes`, `the binary form is exactly ${LSID_BYTES} bytes`);
  }
  let value = 0n;
  for (const byte of bytes) value = (value << 8n) | BigInt(byte);
  return decodeLsid(value, `0x${Buffer.from(bytes).toString('hex')}`);
}

/*
 * The uuid form, for a Postgres `uuid` column. Postgres compares uuids byte by byte, so the 96 bits go in
 * order into a UUIDv8 (RFC 9562 §5.8, "custom"), around its fixed version and variant bits:
 *   bytes 0-5    custom_a: LSID word bits 95..48 (bit 95 is the always-zero top bit of the binary form)
 *   byte 6       version 8 (high nibble) | LSID bits 47..44
 *   byte 7       LSID bits 43..36
 *   byte 8       variant 0b10 (2 bits) | LSID bits 35..30
 *   bytes 9-15   LSID bits 29..0, then 26 zero bits
 * The version and variant bits are the same in every LSID uuid, so byte order = LSID order, and the result
 * is a valid RFC 9562 uuid that any library accepts.
 *
 * Its text is the 128-bit number in hex, grouped 8-4-4-4-12 (RFC 9562 §4). It is written here rather than with
 * the uuid package because that package loads every uuid version (≈ 11 ms) and `shardflake/ids` imports in
 * ≤ 15 ms; the tests check this text against the uuid package's parse/stringify/version.
 */
const UUID_TEXT = /^([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})$/i;
const UUID_VERSION = 8n;
const UUID_VARIANT = 0b10n;
const WORD_BITS = BigInt(LSID_BYTES * 8); // 96
const A_BITS = 48n;
const B_BITS = 12n;
const C_BITS = WORD_BITS - A_BITS - B_BITS; // 36
const PAD_BITS = 62n - C_BITS; // 26 zero bits after custom_c

export function lsidToUuid(input: LsidInput): string {
  const word = lsidValue(input);
  const a = word >> (WORD_BITS - A_BITS);
  const b = (word >> C_BITS) & ((1n << B_BITS) - 1n);
  const c = word & ((1n << C_BITS) - 1n);
  const u = (a << 80n) | (UUID_VERSION << 76n) | (b << 64n) | (UUID_VARIANT << 62n) | (c << PAD_BITS);
  const hex = u.toString(16).padStart(32, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export function lsidFromUuid(text: string): DecodedLsid {
  const groups = typeof text === 'string' ? UUID_TEXT.exec(text) : null;
  if (!groups) throw invalid(text, 'not a uuid');
  const u = BigInt(`0x${groups.slice(1).join('')}`);
  const version = (u >> 76n) & 0xfn;
  const variant = (u >> 62n) & 0b11n;
  if (version !== UUID_VERSION || variant !== UUID_VARIANT || (u & ((1n << PAD_BITS) - 1n)) !== 0n) {
    throw invalid(text, 'an LSID uuid is a version 8 uuid whose last 26 bits are zero');
  }
  const a = u >> 80n;
  const b = (u >> 64n) & ((1n << B_BITS) - 1n);
  const c = (u >> PAD_BITS) & ((1n << C_BITS) - 1n);
  return decodeLsid((a << (B_BITS + C_BITS)) | (b << C_BITS) | c, text);
}

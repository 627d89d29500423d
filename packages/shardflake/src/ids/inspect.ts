import { ObjectId } from 'bson';
import { isValid as isUlid, decodeTime as ulidTime } from 'ulid';
import { validate as isUuid, parse as parseUuid, version as uuidVersion } from 'uuid';
import { optionsObject, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';
import { decodeId, type LayoutInput } from './codec.js';
import { assertIdEncoding, detectEncoding, type IdEncoding, parseId } from './id-text.js';
import { LSID_CHARS, LSID_TEXT_LENGTH, lsidFromUuid, parseLsid } from './lsid-codec.js';

/**
 * Explains any id: detects its format from its shape, decodes it and names its fields. UUID, ULID and ObjectId
 * are parsed by their own packages (uuid, ulid, bson); only the bit positions of the timestamps those packages
 * do not expose (UUID v1/v6) are read here.
 *
 * Detection, by shape (the shapes do not overlap, except where noted):
 * - a 64-bit id, decoded with `layout` (default instagram), in any of the text forms shardflake writes
 *   (id-text.ts): digits only → decimal; 11 characters → base62; 13 characters → Crockford base32. No other
 *   format has 11 or 13 characters. Digits-only text is always decimal, although a string of 11 or 13 digits
 *   could also be a base62/base32 id without letters and a 19-digit one an LSID written without hyphens.
 * - 36 characters (8-4-4-4-12 hex) or 32 hex digits → UUID; a version-8 uuid that is an LSID's uuid form also
 *   shows the LSID.
 * - 24 hex digits → MongoDB ObjectId.
 * - 26 Crockford characters → ULID.
 * - 22 characters with hyphens in 5-8-4-2 groups, or 19 characters → LSID.
 * `format` (and, for 64-bit ids, `encoding`) skip detection, for the ambiguous strings above.
 */
export const ID_FORMATS = ['int64', 'uuid', 'objectid', 'ulid', 'lsid'] as const;
/** The id formats `inspect` recognises: 64-bit ids (`int64`), UUIDs, ObjectIds, ULIDs and LSIDs. */
export type IdFormat = (typeof ID_FORMATS)[number];

export function assertIdFormat(value: string): IdFormat {
  if (!(ID_FORMATS as readonly string[]).includes(value)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `unknown id format ${shown(value)} (one of ${ID_FORMATS.join(', ')})`,
    );
  }
  return value as IdFormat;
}

/** What `inspect` found in an id: its format, timestamp and fields, with a few lines that explain them. */
export interface Inspection {
  /** The id as given, with surrounding whitespace trimmed. */
  input: string;
  /** The format the id was read as: detected from its shape, or the one the `format` option named. */
  format: IdFormat;
  /** For 64-bit ids: the text form the input was written in. */
  encoding?: IdEncoding;
  /** The id's timestamp, or null for formats without one (UUID v4). */
  timestamp: Date | null;
  /** Named fields; numbers where they fit, text (hex, decimal) where they do not. */
  fields: Record<string, number | string>;
  /** One line per fact: what the id is and what each field means. */
  explanation: string[];
}

/** Options of `inspect`: the layout of 64-bit ids, and the format or text form to read instead of detecting them. */
export interface InspectOptions {
  /** Layout for 64-bit ids (default instagram). */
  layout?: LayoutInput;
  /** Read the id as this format instead of detecting it from its shape. */
  format?: IdFormat;
  /** Read a 64-bit id from this text form instead of detecting it; implies format `int64`. */
  encoding?: IdEncoding;
}

const HEX32 = /^[0-9a-f]{32}$/i;
const HEX24 = /^[0-9a-f]{24}$/i;

function inspectInt64(input: string, encoding: IdEncoding, layout: LayoutInput): Inspection {
  const decoded = decodeId(parseId(input, encoding), layout);
  const written = encoding === 'decimal' ? '' : ` ${decoded.id} (written in ${encoding})`;
  const explanation = [
    `64-bit id${written}, layout ${decoded.layout}: tick ${decoded.tick} → ${decoded.timestamp.toISOString()}`,
    ...Object.entries(decoded.fields).map(([name, value]) => `${name} ${value}`),
  ];
  if (decoded.id >= 1n << 63n)
    explanation.push('above 2^63 − 1: negative if stored in a signed bigint column');
  return {
    input,
    format: 'int64',
    encoding,
    timestamp: decoded.timestamp,
    fields: {
      layout: decoded.layout,
      id: decoded.id.toString(),
      tick: decoded.tick.toString(),
      ...decoded.fields,
    },
    explanation,
  };
}

/** Gregorian-calendar 100 ns ticks (UUID v1/v6) → Unix ms. 0x01B21DD213814000 ticks lie between 1582-10-15 and 1970. */
const GREGORIAN_OFFSET = 0x01b21dd213814000n;

function inspectUuid(input: string): Inspection {
  const text = HEX32.test(input)
    ? `${input.slice(0, 8)}-${input.slice(8, 12)}-${input.slice(12, 16)}-${input.slice(16, 20)}-${input.slice(20)}`
    : input;
  if (!isUuid(text)) throw new ShardflakeError('INVALID_ID', `${JSON.stringify(input)} is not a valid UUID`);
  const version = uuidVersion(text);
  const bytes = parseUuid(text);
  let u = 0n;
  for (const byte of bytes) u = (u << 8n) | BigInt(byte);
  const hex = (value: bigint, digits: number) => value.toString(16).padStart(digits, '0');
  const fields: Record<string, number | string> = { version };
  const explanation = [`UUID version ${version} (${text.toLowerCase()})`];
  let timestamp: Date | null = null;
  if (version === 1 || version === 6) {
    // v1: time_low (32) | time_mid (16) | version (4) time_hi (12); v6 stores the same 60 bits high to low.
    const timeLow = u >> 96n;
    const timeMid = (u >> 80n) & 0xffffn;
    const timeHi = (u >> 64n) & 0xfffn;
    const ticks = version === 1 ? (timeHi << 48n) | (timeMid << 32n) | timeLow : ((u >> 80n) << 12n) | timeHi;
    timestamp = new Date(Number((ticks - GREGORIAN_OFFSET) / 10_000n));
    fields.clockSequence = Number((u >> 48n) & 0x3fffn);
    fields.node = hex(u & 0xffffffffffffn, 12);
    explanation.push(
      `timestamp ${timestamp.toISOString()} (60-bit count of 100 ns since 1582-10-15)`,
      `clock sequence ${fields.clockSequence}, node ${fields.node}`,
    );
  } else if (version === 7) {
    const ms = u >> 80n; // unix_ts_ms: the first 48 bits
    timestamp = new Date(Number(ms));
    fields.randA = hex((u >> 64n) & 0xfffn, 3);
    fields.randB = hex(u & 0x3fffffffffffffffn, 16);
    explanation.push(`timestamp ${timestamp.toISOString()} (48-bit Unix milliseconds)`, '74 random bits');
  } else if (version === 4) {
    explanation.push('122 random bits, no timestamp');
  } else if (version === 8) {
    try {
      const decoded = lsidFromUuid(text);
      timestamp = decoded.timestamp;
      Object.assign(fields, lsidFields(decoded));
      explanation.push(
        `the uuid form of an LSID: ${decoded.time}, worker ${decoded.worker}, sequence ${decoded.sequence}`,
      );
    } catch {
      explanation.push('custom (version 8) layout');
    }
  }
  return { input, format: 'uuid', timestamp, fields, explanation };
}

function inspectObjectId(input: string): Inspection {
  if (!HEX24.test(input)) {
    throw new ShardflakeError(
      'INVALID_ID',
      `${JSON.stringify(input).slice(0, 60)} is not an ObjectId (24 hex digits)`,
    );
  }
  const oid = new ObjectId(input.toLowerCase());
  const bytes = oid.id;
  const timestamp = oid.getTimestamp();
  // 4-byte seconds | 5-byte random value per process | 3-byte counter
  const random = Buffer.from(bytes.subarray(4, 9)).toString('hex');
  const counter = ((bytes[9] as number) << 16) | ((bytes[10] as number) << 8) | (bytes[11] as number);
  return {
    input,
    format: 'objectid',
    timestamp,
    fields: { random, counter },
    explanation: [
      `MongoDB ObjectId: timestamp ${timestamp.toISOString()} (32-bit Unix seconds)`,
      `process random value ${random}, counter ${counter}`,
    ],
  };
}

function inspectUlid(input: string): Inspection {
  if (!isUlid(input)) throw new ShardflakeError('INVALID_ID', `${JSON.stringify(input)} is not a valid ULID`);
  let ms: number;
  try {
    ms = ulidTime(input);
  } catch (error) {
    throw new ShardflakeError(
      'INVALID_ID',
      `${JSON.stringify(input)} is not a valid ULID: ${(error as Error).message}`,
    );
  }
  const timestamp = new Date(ms);
  const randomness = input.slice(10).toUpperCase();
  return {
    input,
    format: 'ulid',
    timestamp,
    fields: { randomness },
    explanation: [
      `ULID: timestamp ${timestamp.toISOString()} (48-bit Unix milliseconds)`,
      `80 random bits ${randomness}`,
    ],
  };
}

function lsidFields(decoded: ReturnType<typeof parseLsid>): Record<string, number | string> {
  return {
    day: decoded.day,
    ticks: decoded.ticks,
    worker: decoded.worker,
    sequence: decoded.sequence,
    time: decoded.time,
  };
}

function inspectLsid(input: string): Inspection {
  const decoded = parseLsid(input);
  return {
    input,
    format: 'lsid',
    timestamp: decoded.timestamp,
    fields: lsidFields(decoded),
    explanation: [
      `LSID: day ${decoded.day} (${decoded.timestamp.toISOString().slice(0, 10)}) + ${decoded.ticks} × 100 ns = ${decoded.time}`,
      `worker ${decoded.worker}, sequence ${decoded.sequence}`,
    ],
  };
}

/** The format (and a 64-bit id's text form) that `input` has by shape; see the list at the top. */
function detect(input: string): { format: IdFormat; encoding?: IdEncoding } {
  const encoding = detectEncoding(input);
  if (encoding) return { format: 'int64', encoding };
  if (input.length === 36 || HEX32.test(input)) return { format: 'uuid' };
  if (HEX24.test(input)) return { format: 'objectid' };
  if (input.length === 26) return { format: 'ulid' };
  if (input.length === LSID_TEXT_LENGTH || input.length === LSID_CHARS) return { format: 'lsid' };
  throw new ShardflakeError(
    'INVALID_ID',
    `${JSON.stringify(input).slice(0, 60)} is not an LSID, ULID, UUID, ObjectId or 64-bit id (decimal, base62, base32)`,
  );
}

/** The format to read `input` as: the one the options name, or the one its shape shows. */
function chosenFormat(input: string, options: InspectOptions): { format: IdFormat; encoding?: IdEncoding } {
  const format = options.format === undefined ? undefined : assertIdFormat(options.format);
  const encoding = options.encoding === undefined ? undefined : assertIdEncoding(options.encoding);
  if (encoding !== undefined) {
    if (format !== undefined && format !== 'int64') {
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `an encoding (${encoding}) applies to 64-bit ids only, not to format ${format}`,
      );
    }
    return { format: 'int64', encoding };
  }
  if (format === undefined) return detect(input);
  if (format !== 'int64') return { format };
  const detected = detectEncoding(input);
  if (detected === undefined) {
    throw new ShardflakeError(
      'INVALID_ID',
      `${JSON.stringify(input).slice(0, 60)} is not a 64-bit id: not decimal digits, nor 11 base62 or 13 base32 characters`,
    );
  }
  return { format, encoding: detected };
}

/**
 * Detects the format of `id` (or reads it as `options.format`/`options.encoding`), decodes it and explains its
 * fields. Unrecognised or invalid → INVALID_ID; an unknown format or encoding → INVALID_ARGUMENT.
 */
export function inspect(id: string, options: InspectOptions = {}): Inspection {
  if (typeof id !== 'string') throw new ShardflakeError('INVALID_ID', 'an id to inspect must be a string');
  optionsObject(options, 'inspect: options');
  const input = id.trim();
  const { format, encoding } = chosenFormat(input, options);
  switch (format) {
    case 'int64':
      return inspectInt64(input, encoding ?? 'decimal', options.layout ?? 'instagram');
    case 'uuid':
      return inspectUuid(input);
    case 'objectid':
      return inspectObjectId(input);
    case 'ulid':
      return inspectUlid(input);
    case 'lsid':
      return inspectLsid(input);
  }
}

/** JSON-ready form: timestamp as ISO 8601 UTC (or null), everything else as is (bigints are already text). */
export function inspectionToJson(inspection: Inspection): Record<string, unknown> {
  return {
    input: inspection.input,
    format: inspection.format,
    ...(inspection.encoding === undefined ? {} : { encoding: inspection.encoding }),
    timestamp: inspection.timestamp ? inspection.timestamp.toISOString() : null,
    ...inspection.fields,
    fields: inspection.fields,
  };
}

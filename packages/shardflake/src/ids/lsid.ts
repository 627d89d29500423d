import { optionsObject, shown } from '../errors/arguments.js';
import {
  compareLsid,
  type DecodedLsid,
  decodeLsid,
  encodeLsid,
  type FormatOptions,
  formatLsid,
  type LsidInput,
  type LsidParts,
  lsidFromBytes,
  lsidFromUuid,
  lsidToBytes,
  lsidToUuid,
  parseLsid,
} from './lsid-codec.js';
import { createLsidGenerator, type LsidGenerator, type LsidGeneratorOptions } from './lsid-generator.js';

// The pieces of `lsid` live in lsid-codec.ts (the bits, then text, bytes, uuid) and lsid-generator.ts
// (generation); this module puts them in one object.
let defaultGenerator: LsidGenerator | undefined;
const cachedGenerators = new Map<string, LsidGenerator>();

/**
 * One LSID. Without options it uses the process's default generator (MAC worker id, random sequence). With
 * options but no clock, generators are kept per option set, so repeated calls stay strictly increasing; for
 * a hot loop, `lsid.createGenerator(options)` once and call `next()`.
 */
function generate(options?: LsidGeneratorOptions): string {
  if (options === undefined) {
    defaultGenerator ??= createLsidGenerator();
    return defaultGenerator.next();
  }
  optionsObject(options, 'lsid.generate: options');
  if (options.clock || options.random) return createLsidGenerator(options).next();
  // Kind and value of each option: a worker 5 and a worker "5" must not share a generator (the second is refused).
  const key = [options.worker, options.sequence, options.upper, options.hyphens]
    .map((v) => `${typeof v}:${shown(v)}`)
    .join('|');
  let generator = cachedGenerators.get(key);
  if (!generator) {
    generator = createLsidGenerator(options);
    cachedGenerators.set(key, generator);
  }
  return generator.next();
}

/**
 * LSID (seed 002) in one object: generate, parse and format LSIDs, and convert them to and from their 95-bit
 * value, 12 bytes and a version-8 UUID. docs/ids.md explains the choices the paper leaves open.
 */
export const lsid = Object.freeze({
  /** One LSID as text, from the process's default generator (or one kept per option set). */
  generate,
  /** A generator of your own, for hot loops: `lsid.createGenerator(options).next()`. */
  createGenerator: createLsidGenerator,
  /** Text → value and fields: case-insensitive, Crockford's aliases, hyphens only between the groups. */
  parse: parseLsid,
  /** Value or fields → text, `00jtx-04fecrkm-0cgm-3n` by default. */
  format: formatLsid,
  /** −1, 0 or 1: the order of two LSIDs, which is also the order of their text and of their UUID form. */
  compare: compareLsid,
  /** Fields → the 95-bit value. */
  encode: encodeLsid,
  /** The 95-bit value → fields and time. */
  decode: decodeLsid,
  /** The 12-byte big-endian form, which sorts byte-wise like the LSID. */
  toBytes: lsidToBytes,
  /** The 12-byte form → value and fields. */
  fromBytes: lsidFromBytes,
  /** The version-8 UUID that holds the LSID's bits in order, for a PostgreSQL `uuid` column. */
  toUuid: lsidToUuid,
  /** That UUID → value and fields. */
  fromUuid: lsidFromUuid,
});

export type { DecodedLsid, FormatOptions, LsidGenerator, LsidGeneratorOptions, LsidInput, LsidParts };

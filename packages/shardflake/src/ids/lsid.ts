import { optionsObject, shown } from '../arguments.js';
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

/**
 * LSID (seed 002) in one object: `lsid.generate()`, `lsid.parse(text)`, `lsid.format(value)`, … The pieces
 * live in lsid-layout.ts (the bits), lsid-codec.ts (text, bytes, uuid) and lsid-generator.ts (generation).
 */
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

export const lsid = Object.freeze({
  generate,
  createGenerator: createLsidGenerator,
  parse: parseLsid,
  format: formatLsid,
  compare: compareLsid,
  encode: encodeLsid,
  decode: decodeLsid,
  toBytes: lsidToBytes,
  fromBytes: lsidFromBytes,
  toUuid: lsidToUuid,
  fromUuid: lsidFromUuid,
});

export type { DecodedLsid, FormatOptions, LsidGenerator, LsidGeneratorOptions, LsidInput, LsidParts };

import { compareDecimal, decimalKey, parseDecimal } from './decimal.js';
import { unsupported } from './refuse.js';

/**
 * What the router may do with a value it did not compute: rows travel from the servers as PostgreSQL's text
 * (with each column's type OID), the router compares, groups and adds them by type, and parses each value once,
 * at the end, as node-postgres would (int8 → bigint, numeric → string …). Only types whose text form the router
 * can order and compare exactly are accepted where it must order or compare; any other type is refused by name.
 */
export type Cell = string | null;

export const OID = {
  bool: 16,
  int8: 20,
  int2: 21,
  int4: 23,
  text: 25,
  oid: 26,
  name: 19,
  float4: 700,
  float8: 701,
  money: 790,
  bpchar: 1042,
  varchar: 1043,
  date: 1082,
  timestamp: 1114,
  timestamptz: 1184,
  interval: 1186,
  numeric: 1700,
  uuid: 2950,
} as const;

const INTEGERS: number[] = [OID.int2, OID.int4, OID.int8, OID.oid];
const FLOATS: number[] = [OID.float4, OID.float8];
const TEXTS: number[] = [OID.text, OID.varchar, OID.name, OID.bpchar];

const TYPE_NAMES: Record<number, string> = {
  [OID.money]: 'money',
  [OID.interval]: 'interval',
  114: 'json',
  3802: 'jsonb',
  1009: 'text[]',
};

export function typeName(oid: number): string {
  return TYPE_NAMES[oid] ?? `type OID ${oid}`;
}

export const isText = (oid: number) => TEXTS.includes(oid);
export const isNumeric = (oid: number) =>
  INTEGERS.includes(oid) || FLOATS.includes(oid) || oid === OID.numeric;

/** A key under which equal values of one type are one (GROUP BY, DISTINCT, count(DISTINCT)). */
export function equalityKey(cell: Cell, oid: number): string {
  if (cell === null) return '\u0000null';
  if (oid === OID.numeric) return decimalKey(cell);
  if (FLOATS.includes(oid)) return cell === '-0' ? '0' : cell;
  if (oid === OID.bpchar) return cell.replace(/ +$/, '');
  if (INTEGERS.includes(oid) || TEXTS.includes(oid) || oid === OID.bool || oid === OID.uuid) return cell;
  if (oid === OID.date || oid === OID.timestamp) return cell;
  if (oid === OID.timestamptz) return String(timestampMicros(cell));
  return unsupported(
    `grouping or DISTINCT on ${typeName(oid)} values (the router cannot compare them exactly)`,
  );
}

function floatOf(text: string): number {
  if (text === 'NaN') return Number.NaN;
  return Number(text);
}

/** Float order as PostgreSQL has it: NaN after every number, -0 equal to 0. */
function compareFloats(a: number, b: number): number {
  if (Number.isNaN(a)) return Number.isNaN(b) ? 0 : 1;
  if (Number.isNaN(b)) return -1;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Code point order: what PostgreSQL's C collation gives for UTF-8 text (JS's < compares UTF-16 units). */
function compareCodePoints(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const p = (x[i] as string).codePointAt(0) as number;
    const q = (y[i] as string).codePointAt(0) as number;
    if (p !== q) return p < q ? -1 : 1;
  }
  return x.length - y.length < 0 ? -1 : x.length > y.length ? 1 : 0;
}

/** Microseconds since 1970 of a timestamptz printed in ISO style (`2024-05-01 10:00:00.5+02`). */
function timestampMicros(text: string): bigint {
  if (text === 'infinity') return 2n ** 62n;
  if (text === '-infinity') return -(2n ** 62n);
  const m =
    /^(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?$/.exec(
      text,
    );
  if (!m)
    return unsupported(`ordering the timestamp ${text} (only ISO dates of years 1000–9999 are compared)`);
  const [, y, mo, d, h, mi, s, frac, sign, oh, om, os] = m;
  const ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  const offset = (Number(oh ?? 0) * 3600 + Number(om ?? 0) * 60 + Number(os ?? 0)) * (sign === '-' ? -1 : 1);
  return (BigInt(ms) - BigInt(offset) * 1000n) * 1000n + BigInt((frac ?? '').padEnd(6, '0'));
}

function dateLike(text: string): string {
  if (text === 'infinity') return '\uffff';
  if (text === '-infinity') return '';
  if (!/^\d{4}-\d\d-\d\d/.test(text) || text.endsWith(' BC'))
    unsupported(`ordering the date ${text} (only ISO dates of years 1000–9999 are compared)`);
  return text;
}

/**
 * Compares two non-null values of one type as PostgreSQL orders them. `codePointText` says the servers sort text
 * by code point (C collation); without it text is refused rather than ordered by a guess.
 */
export function compareValues(a: string, b: string, oid: number, codePointText: boolean): number {
  if (INTEGERS.includes(oid)) {
    const x = BigInt(a);
    const y = BigInt(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (oid === OID.numeric) {
    if (a === 'NaN' || b === 'NaN') return a === b ? 0 : a === 'NaN' ? 1 : -1;
    return compareDecimal(parseDecimal(a), parseDecimal(b));
  }
  if (FLOATS.includes(oid)) return compareFloats(floatOf(a), floatOf(b));
  if (oid === OID.bool) return a === b ? 0 : a === 'f' ? -1 : 1;
  if (TEXTS.includes(oid)) {
    if (!codePointText)
      unsupported(
        'ordering text on a server whose collation is not C (the router cannot reproduce its order)',
      );
    return oid === OID.bpchar
      ? compareCodePoints(a.replace(/ +$/, ''), b.replace(/ +$/, ''))
      : compareCodePoints(a, b);
  }
  if (oid === OID.uuid) return a < b ? -1 : a > b ? 1 : 0;
  if (oid === OID.date || oid === OID.timestamp) {
    const x = dateLike(a);
    const y = dateLike(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (oid === OID.timestamptz) {
    const x = timestampMicros(a);
    const y = timestampMicros(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  return unsupported(`ordering or min/max of ${typeName(oid)} values across shards`);
}

/** Whether comparing values of this type needs the servers' collation to be C. */
export const needsCollation = (oid: number) => TEXTS.includes(oid);

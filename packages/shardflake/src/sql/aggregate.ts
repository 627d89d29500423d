import { createRequire } from 'node:module';
import type pg from 'pg';
import { addDecimal, averageDecimal, type Decimal, formatDecimal, parseDecimal } from './decimal.js';
import type { Slot } from './plan.js';
import { unsupported } from './refuse.js';
import { type Cell, compareValues, equalityKey, OID, typeName } from './values.js';

/**
 * Primitive "combine partial aggregates": the per-shard parts of each group, added up into the group's values,
 * with PostgreSQL's types and NULL rules — count of nothing is 0; sum, min, max, avg, bool_and/or of nothing are
 * NULL; sum of int2/int4 is int8, of int8 and numeric is numeric (exact, with the largest scale of the parts);
 * avg of integers and numerics is numeric with PostgreSQL's division scale (decimal.ts); float sums add up in
 * double precision (as PostgreSQL's own parallel aggregation does, the last digits may depend on the order);
 * count(DISTINCT x) unions the shards' sets of x, so a value in two shards counts once.
 */
export interface Group {
  /** The first part's row: its group keys and selected columns. */
  row: Cell[];
  states: SlotState[];
}

type SlotState =
  | { kind: 'count'; n: bigint }
  | { kind: 'sum'; value: Decimal | number | null }
  | { kind: 'best'; value: Cell }
  | { kind: 'bool'; value: boolean | null }
  | { kind: 'avg'; sum: Decimal | number | null; count: bigint }
  | { kind: 'distinct'; seen: Set<string> };

/** Array element types of count(DISTINCT x)'s array_agg parts. */
const ELEMENT_OF: Record<number, number> = {
  1005: OID.int2,
  1007: OID.int4,
  1016: OID.int8,
  1231: OID.numeric,
  1009: OID.text,
  1015: OID.varchar,
  1014: OID.bpchar,
  1000: OID.bool,
  2951: OID.uuid,
  1182: OID.date,
  1115: OID.timestamp,
  1185: OID.timestamptz,
  1021: OID.float4,
  1022: OID.float8,
};

let parseTextArray: ((text: string) => (string | null)[]) | undefined;
function elementsOf(text: string): (string | null)[] {
  const types = (createRequire(import.meta.url)('pg') as typeof pg).types;
  parseTextArray ??= (types.getTypeParser as (oid: number) => (text: string) => (string | null)[])(1009);
  return parseTextArray(text);
}

/** The type OID of a slot's final value, from its parts' types. */
export function finalOid(slot: Slot, oids: number[]): number {
  const part = oids[slot.columns[0] as number] as number;
  switch (slot.kind) {
    case 'count':
    case 'count_distinct':
      return OID.int8;
    case 'bool_and':
    case 'bool_or':
      return OID.bool;
    case 'min':
    case 'max':
      return part;
    case 'sum':
      if (part === OID.int8 || part === OID.numeric || part === OID.float8) return part;
      return unsupported(
        `sum() of ${part === OID.float4 ? 'real (use double precision)' : typeName(part)} values`,
      );
    case 'avg':
      if (part === OID.int8 || part === OID.numeric) return OID.numeric;
      if (part === OID.float8) return OID.float8;
      return unsupported(
        `avg() of ${part === OID.float4 ? 'real (use double precision)' : typeName(part)} values`,
      );
  }
}

export function newStates(slots: Slot[]): SlotState[] {
  return slots.map((slot): SlotState => {
    switch (slot.kind) {
      case 'count':
        return { kind: 'count', n: 0n };
      case 'count_distinct':
        return { kind: 'distinct', seen: new Set() };
      case 'sum':
        return { kind: 'sum', value: null };
      case 'avg':
        return { kind: 'avg', sum: null, count: 0n };
      case 'bool_and':
      case 'bool_or':
        return { kind: 'bool', value: null };
      default:
        return { kind: 'best', value: null };
    }
  });
}

function addSum(total: Decimal | number | null, text: Cell, oid: number): Decimal | number | null {
  if (text === null) return total;
  if (oid === OID.float8) return ((total as number | null) ?? 0) + Number(text);
  const part = parseDecimal(text);
  return total === null ? part : addDecimal(total as Decimal, part);
}

/** Adds one part row into a group's states. */
export function accumulate(
  slots: Slot[],
  states: SlotState[],
  row: Cell[],
  oids: number[],
  codePointText: boolean,
): void {
  slots.forEach((slot, i) => {
    const state = states[i] as SlotState;
    const at = slot.columns[0] as number;
    const cell = row[at] ?? null;
    const oid = oids[at] as number;
    switch (state.kind) {
      case 'count':
        state.n += BigInt(cell ?? 0);
        break;
      case 'sum':
        state.value = addSum(state.value, cell, oid);
        break;
      case 'avg':
        state.sum = addSum(state.sum, cell, oid);
        state.count += BigInt(row[slot.columns[1] as number] ?? 0);
        break;
      case 'bool':
        if (cell !== null) {
          const v = cell === 't';
          state.value =
            state.value === null ? v : slot.kind === 'bool_and' ? state.value && v : state.value || v;
        }
        break;
      case 'best':
        if (cell !== null) {
          if (state.value === null) state.value = cell;
          else {
            const c = compareValues(cell, state.value, oid, codePointText);
            if (slot.kind === 'min' ? c < 0 : c > 0) state.value = cell;
          }
        }
        break;
      case 'distinct': {
        if (cell === null) break;
        const element = ELEMENT_OF[oid];
        if (element === undefined) unsupported(`count(DISTINCT …) of ${typeName(oid)} values`);
        for (const value of elementsOf(cell))
          if (value !== null) state.seen.add(equalityKey(value, element as number));
        break;
      }
    }
  });
}

/** A slot's final value as the text PostgreSQL would have sent. */
export function finish(state: SlotState, oid: number): Cell {
  switch (state.kind) {
    case 'count':
      return String(state.n);
    case 'distinct':
      return String(state.seen.size);
    case 'bool':
      return state.value === null ? null : state.value ? 't' : 'f';
    case 'best':
      return state.value;
    case 'sum':
      if (state.value === null) return null;
      return typeof state.value === 'number' ? String(state.value) : formatDecimal(state.value);
    case 'avg':
      if (state.sum === null || state.count === 0n) return null;
      if (typeof state.sum === 'number') return String(state.sum / Number(state.count));
      if (oid !== OID.numeric) return unsupported(`avg() with result ${typeName(oid)}`);
      return formatDecimal(averageDecimal(state.sum, state.count));
  }
}

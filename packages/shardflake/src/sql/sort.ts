import type { SortKey } from './plan.js';
import { type Cell, compareValues } from './values.js';

/**
 * Primitive "sort": a comparator over rows by the plan's sort keys, as PostgreSQL orders them (direction, NULLS
 * FIRST/LAST, each type's own order: values.ts). Used to merge sorted server streams (merge.ts) and to sort
 * combined groups in memory.
 */
export type Comparator = (a: Cell[], b: Cell[]) => number;

export function comparator(
  keys: readonly { index: number; oid: number; descending: boolean; nullsFirst: boolean }[],
  codePointText: boolean,
): Comparator {
  return (a, b) => {
    for (const key of keys) {
      const x = a[key.index] ?? null;
      const y = b[key.index] ?? null;
      if (x === null || y === null) {
        if (x === y) continue;
        return (x === null) === key.nullsFirst ? -1 : 1;
      }
      const c = compareValues(x, y, key.oid, codePointText);
      if (c !== 0) return key.descending ? -c : c;
    }
    return 0;
  };
}

export type { SortKey };

import { type Cell, equalityKey } from './values.js';

/**
 * Primitive "distinct": drops rows equal to one seen before on the answer's columns, with each type's equality
 * (numeric 1.0 = 1.00, …: values.ts). Keeps a key per distinct row in memory.
 */
export async function* distinctRows(
  rows: AsyncIterable<Cell[]>,
  columns: number,
  oids: () => number[],
): AsyncGenerator<Cell[]> {
  const seen = new Set<string>();
  for await (const row of rows) {
    const types = oids();
    const key = JSON.stringify(row.slice(0, columns).map((cell, i) => equalityKey(cell, types[i] as number)));
    if (seen.has(key)) continue;
    seen.add(key);
    yield row;
  }
}

import type { Comparator } from './sort.js';
import type { Cell } from './values.js';

/**
 * Primitive "merge sorted streams": each server sends its rows already sorted by the query's ORDER BY; the router
 * takes the smallest head each time (k = number of servers, so a linear scan of the heads is enough). Holds one
 * row per server: an ORDER BY over every shard streams.
 */
export async function* mergeSorted(
  sources: readonly { next(): Promise<Cell[] | undefined> }[],
  compare: Comparator,
): AsyncGenerator<Cell[]> {
  const heads = await Promise.all(sources.map((s) => s.next()));
  for (;;) {
    let best = -1;
    for (let i = 0; i < heads.length; i++) {
      const row = heads[i];
      if (row && (best === -1 || compare(row, heads[best] as Cell[]) < 0)) best = i;
    }
    if (best === -1) return;
    yield heads[best] as Cell[];
    heads[best] = await (sources[best] as { next(): Promise<Cell[] | undefined> }).next();
  }
}

/** Unordered: every server's rows, each server drained in turn while the others' first batches are on the way. */
export async function* concatenate(
  sources: readonly { next(): Promise<Cell[] | undefined> }[],
): AsyncGenerator<Cell[]> {
  for (const source of sources) {
    for (let row = await source.next(); row; row = await source.next()) yield row;
  }
}

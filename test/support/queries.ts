import pg from 'pg';

/**
 * The queries handed to any pg client of this process while `fn` runs (a pipelined batch is one: one round trip),
 * with `fn`'s result. A router's own background work (its map's LISTEN, its first look at a new connection) can
 * add one to a count; tests that count round trips take the fewest over a few calls where that matters.
 */
export async function queriesDuring<T>(fn: () => Promise<T>): Promise<{ result: T; queries: number }> {
  const original = pg.Client.prototype.query;
  let queries = 0;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    queries++;
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof original;
  try {
    return { result: await fn(), queries };
  } finally {
    pg.Client.prototype.query = original;
  }
}

import pg from 'pg';
import { CATALOG_APPLICATION_NAME } from '../../packages/shardflake/src/routing/catalog-connection.js';

/**
 * The queries handed to any pg client of this process while `fn` runs (a pipelined batch is one: one round trip),
 * with `fn`'s result. A router's catalog connection is not counted: what it sends (map reads after a notification,
 * the LISTEN) is the router's background work, which a loaded machine can land inside any call. Other background
 * work (a first look at a new connection) can still add one to a count; tests that count round trips take the
 * fewest over a few calls where that matters.
 */
export async function queriesDuring<T>(
  fn: () => Promise<T>,
): Promise<{ result: T; queries: number; texts: string[] }> {
  const original = pg.Client.prototype.query;
  let queries = 0;
  const texts: string[] = [];
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    if (!isCatalogConnection(this)) {
      queries++;
      // What was sent, for a test's message when a count is off (the first line of its text, or the kind of query).
      const first = args[0] as { text?: unknown; constructor?: { name?: string } } | string | undefined;
      const text =
        typeof first === 'string'
          ? first
          : typeof first?.text === 'string'
            ? first.text
            : first?.constructor?.name;
      texts.push(
        String(text ?? '?')
          .split('\n')[0]
          ?.slice(0, 120) ?? '?',
      );
    }
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof original;
  try {
    return { result: await fn(), queries, texts };
  } finally {
    pg.Client.prototype.query = original;
  }
}

/** The router's one catalog connection (routing/catalog-connection.ts), by the application_name it connects with. */
function isCatalogConnection(client: pg.Client): boolean {
  const params = (client as unknown as { connectionParameters?: { application_name?: string } })
    .connectionParameters;
  return params?.application_name === CATALOG_APPLICATION_NAME;
}

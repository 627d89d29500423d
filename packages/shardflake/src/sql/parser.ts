import type { Node, ParseResult, SelectStmt } from '@pgsql/types';
import { ShardflakeError } from '../errors/errors.js';
import { loadPgParser, missingPackage } from '../postgres/parser.js';
import { unsupported } from './refuse.js';

/**
 * The real PostgreSQL parser (postgres/parser.ts) and its printer (pgsql-deparser), loaded on the first
 * `router.sql` only: together they take ≈ 1 s to load and compile, which an application that never asks a
 * cross-shard question should not pay, nor load at import.
 *
 * They are optional peer dependencies of `shardflake` (≈ 3 MB that an app without cross-shard reads should not
 * carry into its image): an app that calls `router.sql` installs them; one that does not gets MISSING_PACKAGE
 * naming the install command, on the first call and on every later one (a failed load is not remembered as done).
 */
interface SqlTools {
  parse(text: string): Promise<ParseResult>;
  print(node: Node): string;
}

let tools: Promise<SqlTools> | undefined;

/** The versions `shardflake` is tested with (its peerDependencies say the same). */
export const SQL_PACKAGES = 'libpg-query@18 pgsql-deparser@18';

export function loadSqlTools(): Promise<SqlTools> {
  tools ??= (async (): Promise<SqlTools> => {
    const [parser, printer] = await Promise.all([
      loadPgParser('router.sql', SQL_PACKAGES),
      import('pgsql-deparser').catch((error: unknown) => {
        throw missingPackage(error, 'pgsql-deparser', 'router.sql', SQL_PACKAGES);
      }),
    ]);
    return {
      parse: (text) => parser.parse(text),
      print: (node) => printer.deparseSync(node, { pretty: false }),
    };
  })().catch((error: unknown) => {
    tools = undefined;
    throw error;
  });
  return tools;
}

/** The one SELECT of `text`, as a tree; a syntax error is INVALID_ARGUMENT, anything but one SELECT is refused. */
export async function parseSelect(text: string): Promise<SelectStmt> {
  if (typeof text !== 'string' || text.trim() === '')
    throw new ShardflakeError('INVALID_ARGUMENT', 'router.sql needs the text of one SELECT');
  const { parse } = await loadSqlTools();
  let result: ParseResult;
  try {
    result = await parse(text);
  } catch (error) {
    throw new ShardflakeError('INVALID_ARGUMENT', `router.sql: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const statements = result.stmts ?? [];
  if (statements.length !== 1) unsupported(`${statements.length} statements (send one SELECT at a time)`);
  const statement = statements[0]?.stmt as Node;
  if (!('SelectStmt' in statement))
    unsupported(`${Object.keys(statement)[0]} (only SELECT is answered across shards)`);
  return statement.SelectStmt;
}

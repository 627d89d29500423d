import type { Node, ParseResult, SelectStmt } from '@pgsql/types';
import { ShardflakeError } from '../../errors.js';
import { unsupported } from './refuse.js';

/**
 * The real PostgreSQL parser (libpg-query: PostgreSQL's own grammar compiled to WebAssembly, no native build) and
 * its printer (pgsql-deparser), loaded on the first `router.sql` only: together they take ≈ 1 s to load and
 * compile, which an application that never asks a cross-shard question should not pay, nor load at import.
 */
interface SqlTools {
  parse(text: string): Promise<ParseResult>;
  print(node: Node): string;
}

let tools: Promise<SqlTools> | undefined;

export function loadSqlTools(): Promise<SqlTools> {
  tools ??= (async () => {
    const [parser, printer] = await Promise.all([import('libpg-query'), import('pgsql-deparser')]);
    return {
      parse: (text) => parser.parse(text),
      print: (node) => printer.deparseSync(node, { pretty: false }),
    };
  })();
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

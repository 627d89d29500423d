import type { JoinExpr, Node, RangeVar } from '@pgsql/types';
import { checkExpression } from './check.js';
import { unsupported } from './refuse.js';
import { columnNames } from './tree.js';

/**
 * The FROM clause: sharded tables by their unqualified names, joined only where the rows that join live in one
 * shard. Each shard runs the join on its own rows, so a join is exact when matching rows are colocated, which is
 * the case when the join condition equates one table's `id` with a column of the other: a row's id carries the
 * shard it was made in, and rows kept on their parent's shard (the router's `keysAreIds` routing: photos on
 * their user's shard) hold that parent's id. Joins on anything else (no condition, other columns, comma joins,
 * NATURAL) could pair rows of two shards and are refused.
 *
 * Returns the table references, which the planner points at each shard's schema.
 */
export function checkFrom(from: Node[]): RangeVar[] {
  if (from.length !== 1) unsupported('several FROM items (write the join with JOIN … ON a.id = b.column)');
  const tables: RangeVar[] = [];
  visit(from[0] as Node, tables);
  return tables;
}

function visit(item: Node, tables: RangeVar[]): Set<string> {
  if ('RangeVar' in item) {
    const table = item.RangeVar;
    if (table.schemaname || table.catalogname)
      unsupported(
        `the qualified name ${table.schemaname}.${table.relname} (name sharded tables without a schema)`,
      );
    tables.push(table);
    return new Set([table.alias?.aliasname ?? (table.relname as string)]);
  }
  if ('JoinExpr' in item) return visitJoin(item.JoinExpr, tables);
  if ('RangeSubselect' in item) return unsupported('a subquery in FROM');
  if ('RangeFunction' in item) return unsupported('a function in FROM');
  return unsupported(`${Object.keys(item)[0]} in FROM`);
}

function visitJoin(join: JoinExpr, tables: RangeVar[]): Set<string> {
  if (join.isNatural) unsupported('NATURAL JOIN (say which columns join: a.id = b.column)');
  if (join.alias) unsupported('an alias on a join');
  const left = visit(join.larg as Node, tables);
  const right = visit(join.rarg as Node, tables);
  const using = (join.usingClause ?? []).map((n) => ('String' in n ? n.String.sval : ''));
  const colocated = using.includes('id') || conjuncts(join.quals).some((c) => joinsOnId(c, left, right));
  if (!colocated)
    unsupported(
      'a join whose condition does not equate one table’s id with a column of the other (only joins of rows colocated in one shard are exact)',
    );
  checkExpression(join.quals, 'a join condition', false);
  return new Set([...left, ...right]);
}

function conjuncts(node: Node | undefined): Node[] {
  if (!node) return [];
  if ('BoolExpr' in node && node.BoolExpr.boolop === 'AND_EXPR')
    return (node.BoolExpr.args ?? []).flatMap(conjuncts);
  return [node];
}

/** `l.id = r.x` or `r.x = l.id` (either side's id), with both columns qualified by a table of each side. */
function joinsOnId(node: Node, left: Set<string>, right: Set<string>): boolean {
  if (!('A_Expr' in node) || node.A_Expr.kind !== 'AEXPR_OP') return false;
  const op = node.A_Expr.name?.[0];
  if (!op || !('String' in op) || op.String.sval !== '=' || node.A_Expr.name?.length !== 1) return false;
  const a = columnNames(node.A_Expr.lexpr as Node);
  const b = columnNames(node.A_Expr.rexpr as Node);
  if (a?.length !== 2 || b?.length !== 2) return false;
  const [ta, ca] = a as [string, string];
  const [tb, cb] = b as [string, string];
  const crosses = (left.has(ta) && right.has(tb)) || (right.has(ta) && left.has(tb));
  return crosses && (ca === 'id' || cb === 'id');
}

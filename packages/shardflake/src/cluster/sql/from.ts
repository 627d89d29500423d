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
 * Reference tables (`reference`, config `referenceTables`) hold the same rows on every server, so each shard may
 * join its rows with them on any condition: an inner join, or an outer join that keeps only the sharded side's
 * unmatched rows (a reference row kept unmatched would come back once per shard). A query of reference tables
 * alone is refused: every shard would return the same rows.
 *
 * Returns the table references, which the planner points at each shard's schema (or the reference schema).
 */
export function checkFrom(from: Node[], reference: ReadonlySet<string>): RangeVar[] {
  if (from.length !== 1) unsupported('several FROM items (write the join with JOIN … ON a.id = b.column)');
  const tables: RangeVar[] = [];
  if (!visit(from[0] as Node, tables, reference).sharded)
    unsupported(
      'a query of reference tables only (every shard would return their rows; read them in a shard session or withReference)',
    );
  return tables;
}

/** The names a FROM item brings into scope, and whether a sharded table is among them. */
interface Scope {
  names: Set<string>;
  sharded: boolean;
}

function visit(item: Node, tables: RangeVar[], reference: ReadonlySet<string>): Scope {
  if ('RangeVar' in item) {
    const table = item.RangeVar;
    if (table.schemaname || table.catalogname)
      unsupported(
        `the qualified name ${table.schemaname}.${table.relname} (name sharded tables without a schema)`,
      );
    tables.push(table);
    return {
      names: new Set([table.alias?.aliasname ?? (table.relname as string)]),
      sharded: !reference.has(table.relname as string),
    };
  }
  if ('JoinExpr' in item) return visitJoin(item.JoinExpr, tables, reference);
  if ('RangeSubselect' in item) return unsupported('a subquery in FROM');
  if ('RangeFunction' in item) return unsupported('a function in FROM');
  return unsupported(`${Object.keys(item)[0]} in FROM`);
}

function visitJoin(join: JoinExpr, tables: RangeVar[], reference: ReadonlySet<string>): Scope {
  if (join.isNatural) unsupported('NATURAL JOIN (say which columns join: a.id = b.column)');
  if (join.alias) unsupported('an alias on a join');
  const left = visit(join.larg as Node, tables, reference);
  const right = visit(join.rarg as Node, tables, reference);
  const scope = { names: new Set([...left.names, ...right.names]), sharded: left.sharded || right.sharded };
  if (!left.sharded || !right.sharded) {
    // A reference side: any condition; its unmatched rows must not be kept (they would repeat per shard).
    const keepsLeft = join.jointype === 'JOIN_LEFT' || join.jointype === 'JOIN_FULL';
    const keepsRight = join.jointype === 'JOIN_RIGHT' || join.jointype === 'JOIN_FULL';
    if ((keepsLeft && !left.sharded && right.sharded) || (keepsRight && !right.sharded && left.sharded))
      unsupported(
        'an outer join that keeps a reference table’s unmatched rows (they would come back once per shard; put the sharded table on the kept side)',
      );
    checkExpression(join.quals, 'a join condition', false);
    return scope;
  }
  const using = (join.usingClause ?? []).map((n) => ('String' in n ? n.String.sval : ''));
  const colocated =
    using.includes('id') || conjuncts(join.quals).some((c) => joinsOnId(c, left.names, right.names));
  if (!colocated)
    unsupported(
      'a join whose condition does not equate one table’s id with a column of the other (only joins of rows colocated in one shard are exact)',
    );
  checkExpression(join.quals, 'a join condition', false);
  return scope;
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

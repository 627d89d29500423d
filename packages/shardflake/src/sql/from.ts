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
 * Reference tables (config `referenceTables`, one whole copy on every server) join sharded rows on any condition:
 * each shard joins its own rows with all of the reference rows, so the shards' parts add up to the whole join —
 * as long as the join does not keep the reference side's unmatched rows (a LEFT JOIN from a reference table, a
 * RIGHT JOIN to one, a FULL JOIN), which every shard would add once. Those are refused. A query on reference
 * tables alone is not split at all (plan.ts asks one server).
 *
 * Returns the table references, which the planner points at each shard's schema (or the reference schema).
 */
export function checkFrom(from: Node[], reference: ReadonlySet<string>): RangeVar[] {
  if (from.length !== 1) unsupported('several FROM items (write the join with JOIN … ON a.id = b.column)');
  const tables: RangeVar[] = [];
  visit(from[0] as Node, tables, reference);
  return tables;
}

/** The names a FROM item makes visible (aliases or table names), and those of them that are sharded tables. */
interface Side {
  names: Set<string>;
  sharded: Set<string>;
}

function visit(item: Node, tables: RangeVar[], reference: ReadonlySet<string>): Side {
  if ('RangeVar' in item) {
    const table = item.RangeVar;
    if (table.schemaname || table.catalogname)
      unsupported(
        `the qualified name ${table.schemaname}.${table.relname} (name sharded tables without a schema)`,
      );
    tables.push(table);
    const name = table.alias?.aliasname ?? (table.relname as string);
    return { names: new Set([name]), sharded: new Set(reference.has(table.relname as string) ? [] : [name]) };
  }
  if ('JoinExpr' in item) return visitJoin(item.JoinExpr, tables, reference);
  if ('RangeSubselect' in item) return unsupported('a subquery in FROM');
  if ('RangeFunction' in item) return unsupported('a function in FROM');
  return unsupported(`${Object.keys(item)[0]} in FROM`);
}

function visitJoin(join: JoinExpr, tables: RangeVar[], reference: ReadonlySet<string>): Side {
  if (join.isNatural) unsupported('NATURAL JOIN (say which columns join: a.id = b.column)');
  if (join.alias) unsupported('an alias on a join');
  const left = visit(join.larg as Node, tables, reference);
  const right = visit(join.rarg as Node, tables, reference);
  const side = {
    names: new Set([...left.names, ...right.names]),
    sharded: new Set([...left.sharded, ...right.sharded]),
  };
  if (left.sharded.size === 0 || right.sharded.size === 0) {
    const keepsReferenceRows =
      join.jointype === 'JOIN_FULL' ||
      (join.jointype === 'JOIN_LEFT' && left.sharded.size === 0) ||
      (join.jointype === 'JOIN_RIGHT' && right.sharded.size === 0);
    if (keepsReferenceRows && side.sharded.size > 0)
      unsupported(
        'an outer join that keeps a reference table’s unmatched rows (every shard would add them once; join from the sharded table instead)',
      );
    checkExpression(join.quals, 'a join condition', false);
    return side;
  }
  const using = (join.usingClause ?? []).map((n) => ('String' in n ? n.String.sval : ''));
  const colocated =
    using.includes('id') || conjuncts(join.quals).some((c) => joinsOnId(c, left.sharded, right.sharded));
  if (!colocated)
    unsupported(
      'a join whose condition does not equate one table’s id with a column of the other (only joins of rows colocated in one shard are exact)',
    );
  checkExpression(join.quals, 'a join condition', false);
  return side;
}

function conjuncts(node: Node | undefined): Node[] {
  if (!node) return [];
  if ('BoolExpr' in node && node.BoolExpr.boolop === 'AND_EXPR')
    return (node.BoolExpr.args ?? []).flatMap(conjuncts);
  return [node];
}

/** `l.id = r.x` or `r.x = l.id` (either side's id), with both columns qualified by a sharded table of each side. */
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

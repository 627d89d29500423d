import type { Node } from '@pgsql/types';
import { compareDecimal, parseDecimal } from './decimal.js';
import { unsupported } from './refuse.js';
import { type Cell, compareValues, isNumeric, isText, OID } from './values.js';

/**
 * HAVING, evaluated by the router on combined groups (a shard cannot: its groups are partial). The router
 * evaluates what it can do exactly: AND, OR, NOT (three-valued, as SQL), IS [NOT] NULL, and the comparisons
 * = <> < <= > >= between aggregates, group keys, constants and parameters. Anything else is refused.
 */
export type Operand =
  | { kind: 'column'; index: number }
  | { kind: 'const'; text: string | null; oid: number }
  | { kind: 'param'; index: number };

export type HavingExpr =
  | { kind: 'and' | 'or'; args: HavingExpr[] }
  | { kind: 'not'; arg: HavingExpr }
  | { kind: 'compare'; op: string; left: Operand; right: Operand }
  | { kind: 'null'; negated: boolean; arg: Operand };

const UNKNOWN = 705; // a string constant, typed by what it is compared with
const COMPARISONS = ['=', '<>', '!=', '<', '<=', '>', '>='];

export function compileHaving(node: Node, column: (node: Node) => number): HavingExpr {
  if ('BoolExpr' in node) {
    const args = (node.BoolExpr.args ?? []).map((a) => compileHaving(a, column));
    if (node.BoolExpr.boolop === 'NOT_EXPR') return { kind: 'not', arg: args[0] as HavingExpr };
    return { kind: node.BoolExpr.boolop === 'OR_EXPR' ? 'or' : 'and', args };
  }
  if ('NullTest' in node)
    return {
      kind: 'null',
      negated: node.NullTest.nulltesttype === 'IS_NOT_NULL',
      arg: operand(node.NullTest.arg as Node, column),
    };
  if ('A_Expr' in node && node.A_Expr.kind === 'AEXPR_OP' && node.A_Expr.name?.length === 1) {
    const op = (node.A_Expr.name[0] as { String: { sval: string } }).String.sval;
    if (COMPARISONS.includes(op))
      return {
        kind: 'compare',
        op,
        left: operand(node.A_Expr.lexpr as Node, column),
        right: operand(node.A_Expr.rexpr as Node, column),
      };
  }
  return unsupported('this HAVING condition (the router evaluates AND, OR, NOT, IS NULL and = <> < <= > >=)');
}

function operand(node: Node, column: (node: Node) => number): Operand {
  if (
    'TypeCast' in node &&
    node.TypeCast.arg &&
    ('A_Const' in node.TypeCast.arg || 'ParamRef' in node.TypeCast.arg)
  )
    return operand(node.TypeCast.arg, column);
  if ('ParamRef' in node) return { kind: 'param', index: (node.ParamRef.number ?? 1) - 1 };
  if ('A_Const' in node) {
    const c = node.A_Const;
    if (c.isnull) return { kind: 'const', text: null, oid: UNKNOWN };
    if (c.ival) return { kind: 'const', text: String(c.ival.ival ?? 0), oid: OID.numeric };
    if (c.fval) return { kind: 'const', text: c.fval.fval ?? '0', oid: OID.numeric };
    if (c.boolval) return { kind: 'const', text: c.boolval.boolval ? 't' : 'f', oid: OID.bool };
    if (c.sval) return { kind: 'const', text: c.sval.sval ?? '', oid: UNKNOWN };
    return unsupported('this constant in HAVING');
  }
  return { kind: 'column', index: column(node) };
}

interface Typed {
  text: Cell;
  oid: number;
}

export interface HavingContext {
  cells: Cell[];
  oids: number[];
  values: readonly unknown[];
  codePointText: boolean;
}

function operandValue(op: Operand, ctx: HavingContext): Typed {
  if (op.kind === 'column') return { text: ctx.cells[op.index] ?? null, oid: ctx.oids[op.index] as number };
  if (op.kind === 'const') return { text: op.text, oid: op.oid };
  const v = ctx.values[op.index];
  if (v === null || v === undefined) return { text: null, oid: UNKNOWN };
  if (typeof v === 'number' || typeof v === 'bigint') return { text: String(v), oid: OID.numeric };
  if (typeof v === 'boolean') return { text: v ? 't' : 'f', oid: OID.bool };
  if (typeof v === 'string') return { text: v, oid: UNKNOWN };
  return unsupported(`a ${typeof v} parameter in HAVING`);
}

function compareTyped(a: Typed, b: Typed, codePointText: boolean): number {
  const oidA = a.oid === UNKNOWN ? b.oid : a.oid;
  const oidB = b.oid === UNKNOWN ? a.oid : b.oid;
  const x = a.text as string;
  const y = b.text as string;
  if (isNumeric(oidA) && isNumeric(oidB)) {
    if (oidA === OID.float4 || oidA === OID.float8 || oidB === OID.float4 || oidB === OID.float8)
      return compareValues(x, y, OID.float8, codePointText);
    return compareDecimal(parseDecimal(x), parseDecimal(y));
  }
  if (oidA === oidB || (isText(oidA) && isText(oidB)) || oidA === UNKNOWN)
    return compareValues(x, y, oidA === UNKNOWN ? OID.text : oidA, codePointText);
  return unsupported('a HAVING comparison between values of different types');
}

/** true, false or null (unknown), as SQL. */
export function evaluateHaving(expr: HavingExpr, ctx: HavingContext): boolean | null {
  switch (expr.kind) {
    case 'and': {
      let result: boolean | null = true;
      for (const arg of expr.args) {
        const v = evaluateHaving(arg, ctx);
        if (v === false) return false;
        if (v === null) result = null;
      }
      return result;
    }
    case 'or': {
      let result: boolean | null = false;
      for (const arg of expr.args) {
        const v = evaluateHaving(arg, ctx);
        if (v === true) return true;
        if (v === null) result = null;
      }
      return result;
    }
    case 'not': {
      const v = evaluateHaving(expr.arg, ctx);
      return v === null ? null : !v;
    }
    case 'null': {
      const isNull = operandValue(expr.arg, ctx).text === null;
      return expr.negated ? !isNull : isNull;
    }
    case 'compare': {
      const a = operandValue(expr.left, ctx);
      const b = operandValue(expr.right, ctx);
      if (a.text === null || b.text === null) return null;
      const c = compareTyped(a, b, ctx.codePointText);
      switch (expr.op) {
        case '=':
          return c === 0;
        case '<>':
        case '!=':
          return c !== 0;
        case '<':
          return c < 0;
        case '<=':
          return c <= 0;
        case '>':
          return c > 0;
        default:
          return c >= 0;
      }
    }
  }
}

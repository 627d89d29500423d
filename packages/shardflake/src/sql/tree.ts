import type { Node } from '@pgsql/types';

/** Small helpers over libpg-query's JSON parse tree (one key per node: `{ FuncCall: {…} }`). */

export function kindOf(node: Node): string {
  return Object.keys(node)[0] as string;
}

/** The node's fields whatever its kind. */
export function body(node: Node): Record<string, unknown> {
  return (node as unknown as Record<string, Record<string, unknown>>)[kindOf(node)] ?? {};
}

/** Structural equality, ignoring `location` (where the text was): `count(x)` in HAVING equals `count(x)` in SELECT. */
export function sameTree(a: unknown, b: unknown): boolean {
  return fingerprint(a) === fingerprint(b);
}

export function fingerprint(node: unknown): string {
  return JSON.stringify(node, (key, value) => (key === 'location' ? undefined : value));
}

export function clone<T>(node: T): T {
  return structuredClone(node);
}

/** Every node under `node` (depth first, the node itself included), with the key it hangs from. */
export function* walk(node: unknown, key = ''): Generator<{ node: Node; key: string }> {
  if (Array.isArray(node)) {
    for (const item of node) yield* walk(item, key);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  const keys = Object.keys(node);
  // A node is an object with one key whose name starts with a capital (`{ ColumnRef: {…} }`).
  if (keys.length === 1 && /^[A-Z]/.test(keys[0] as string)) {
    yield { node: node as Node, key };
    yield* walk((node as Record<string, unknown>)[keys[0] as string], key);
    return;
  }
  for (const k of keys) yield* walk((node as Record<string, unknown>)[k], k);
}

/** The plain names of a ColumnRef (`u.country` → ['u', 'country']); undefined for `*` parts. */
export function columnNames(node: Node): string[] | undefined {
  if (!('ColumnRef' in node)) return undefined;
  const names: string[] = [];
  for (const field of node.ColumnRef.fields ?? []) {
    if (!('String' in field)) return undefined;
    names.push(field.String.sval ?? '');
  }
  return names;
}

/** A function's name without its schema (`pg_catalog.count` → `count`), lower case as the parser gives it. */
export function functionName(node: Node): string | undefined {
  if (!('FuncCall' in node)) return undefined;
  const parts = node.FuncCall.funcname ?? [];
  const last = parts[parts.length - 1];
  return last && 'String' in last ? last.String.sval : undefined;
}

export function functionSchema(node: Node): string | undefined {
  if (!('FuncCall' in node)) return undefined;
  const parts = node.FuncCall.funcname ?? [];
  const first = parts.length > 1 ? parts[0] : undefined;
  return first && 'String' in first ? first.String.sval : undefined;
}

/** An integer constant node (`LIMIT 10`, `ORDER BY 2`). */
export function integerConstant(node: Node | undefined): number | undefined {
  if (!node || !('A_Const' in node)) return undefined;
  const ival = node.A_Const.ival;
  if (ival === undefined) return undefined;
  return ival.ival ?? 0;
}

export function columnRef(...names: string[]): Node {
  return { ColumnRef: { fields: names.map((sval) => ({ String: { sval } })) } };
}

export function funcCall(name: string, args: Node[], extra: Record<string, unknown> = {}): Node {
  return {
    FuncCall: { funcname: [{ String: { sval: name } }], args, funcformat: 'COERCE_EXPLICIT_CALL', ...extra },
  };
}

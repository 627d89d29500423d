import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';

const ROOT = new URL('../../../', import.meta.url).pathname;
/** Every package's sources: the library, the CLI (with bench and dashboard) and the embedded servers. */
const SRCS = ['packages/shardflake/src', 'packages/cli/src', 'packages/embedded/src'].map((p) =>
  join(ROOT, p),
);

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

/** Relative imports and re-exports of a source file, type-only ones included (a circle of types is one too). */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'(\.[^']+)'/g)].map(
    (m) => m[1],
  );
  found.push(...[...text.matchAll(/import\(\s*'(\.[^']+)'\s*\)/g)].map((m) => m[1]));
  return found.map((spec) => resolve(dirname(file), (spec as string).replace(/\.js$/, '.ts')));
}

/** Every import circle, each once: a depth-first walk that reports a back edge as the path that closes it. */
export function circles(graph: Map<string, string[]>): string[][] {
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (node: string) => {
    state.set(node, 'open');
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'open') found.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of [...graph.keys()].sort()) if (!state.has(node)) visit(node);
  return found;
}

test('the walk finds a circle where there is one (a → b → c → a) and none in a tree', () => {
  const circle = new Map([
    ['a', ['b']],
    ['b', ['c']],
    ['c', ['a', 'd']],
    ['d', []],
  ]);
  assert.deepEqual(circles(circle), [['a', 'b', 'c', 'a']]);
  assert.deepEqual(
    circles(
      new Map([
        ['a', ['b', 'c']],
        ['b', ['c']],
        ['c', []],
      ]),
    ),
    [],
  );
});

test('no import circle among the library, CLI, bench and dashboard sources (type-only imports included)', () => {
  const files = SRCS.flatMap(sources);
  const graph = new Map(files.map((f) => [f, importsOf(f)]));
  const edges = [...graph.values()].reduce((n, list) => n + list.length, 0);
  assert.ok(files.length > 50 && edges > 200, `read ${files.length} files, ${edges} imports`);
  const missing = [...graph.entries()].flatMap(([f, list]) =>
    list.filter((to) => !graph.has(to)).map((to) => `${relative(ROOT, f)} → ${relative(ROOT, to)}`),
  );
  assert.deepEqual(missing, [], 'every relative import resolves to a source file');
  const found = circles(graph).map((c) => c.map((f) => relative(ROOT, f)).join(' → '));
  assert.deepEqual(found, []);
});

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

const LIBRARY = join(ROOT, 'packages/shardflake/src');

/**
 * The folder graph at one level: for every folder `dir` (and each of its subfolders), an edge from one child of
 * `dir` to another when a file anywhere below the first imports a file anywhere below the second. Files directly in
 * `dir` count as the child `.`. A cycle here is two parts of one folder that import each other, even when no file
 * circle shows it (the two directions go through different files).
 */
export function folderGraphs(
  files: string[],
  graph: Map<string, string[]>,
): Map<string, Map<string, string[]>> {
  const levels = new Map<string, Map<string, string[]>>();
  const childOf = (dir: string, file: string): string | undefined => {
    const rel = relative(dir, file);
    if (rel.startsWith('..')) return undefined;
    const parts = rel.split('/');
    return parts.length === 1 ? '.' : parts[0];
  };
  const dirs = new Set(
    files.flatMap((f) => {
      const out: string[] = [];
      for (let d = dirname(f); SRCS.some((s) => d.startsWith(s)); d = dirname(d)) out.push(d);
      return out;
    }),
  );
  for (const dir of dirs) {
    const level = new Map<string, string[]>();
    for (const [from, list] of graph) {
      const a = childOf(dir, from);
      if (a === undefined) continue;
      for (const to of list) {
        const b = childOf(dir, to);
        if (b === undefined || a === b) continue;
        const edges = level.get(a) ?? [];
        if (!edges.includes(b)) edges.push(b);
        level.set(a, edges);
      }
    }
    levels.set(dir, level);
  }
  return levels;
}

test('no folder cycle: inside every folder of every package, the parts import one way', () => {
  const files = SRCS.flatMap(sources);
  const graph = new Map(files.map((f) => [f, importsOf(f)]));
  const levels = folderGraphs(files, graph);
  const top = levels.get(LIBRARY);
  assert.ok(top && top.size >= 10, `the library's top level has ${top?.size} folders that import`);
  const found = [...levels].flatMap(([dir, level]) =>
    circles(level).map((c) => `${relative(ROOT, dir)}: ${c.join(' → ')}`),
  );
  assert.deepEqual(found, []);
});

test('the folder walk sees a cycle that goes through different files (a/x → b/y, b/z → a/w)', () => {
  const f = (p: string) => join(LIBRARY, p);
  const files = ['a/x.ts', 'a/w.ts', 'b/y.ts', 'b/z.ts'].map(f);
  const graph = new Map([
    [f('a/x.ts'), [f('b/y.ts')]],
    [f('a/w.ts'), []],
    [f('b/y.ts'), []],
    [f('b/z.ts'), [f('a/w.ts')]],
  ]);
  assert.deepEqual(circles(graph), [], 'no file circle');
  assert.deepEqual(circles(folderGraphs(files, graph).get(LIBRARY) ?? new Map()), [['a', 'b', 'a']]);
});

/** `/* <folder>/: … May import: a, b, c. *\/` at the top of one file of the folder (docs/architecture.md). */
function declaredImports(folder: string): { file: string; imports: string[] }[] {
  return readdirSync(join(LIBRARY, folder))
    .filter((name) => name.endsWith('.ts'))
    .flatMap((name) => {
      const head = /^\/\*\n([\s\S]*?)\*\//.exec(readFileSync(join(LIBRARY, folder, name), 'utf8'));
      const text = `\n${head?.[1] ?? ''}`.replace(/\n \* ?/g, ' ').trim();
      if (!text.startsWith(`${folder}/:`)) return [];
      const may = /May import: ([^.]*)\./.exec(text)?.[1] ?? '';
      const imports = may.startsWith('nothing') ? [] : may.split(',').map((s) => s.trim());
      return [{ file: `${folder}/${name}`, imports }];
    });
}

test("each of the library's folders says in its main file what it owns and may import, and imports nothing else", () => {
  const files = sources(LIBRARY);
  const graph = new Map(files.map((f) => [f, importsOf(f)]));
  const top = folderGraphs(files, graph).get(LIBRARY) ?? new Map<string, string[]>();
  const folders = readdirSync(LIBRARY).filter((n) => statSync(join(LIBRARY, n)).isDirectory());
  const wrong: string[] = [];
  for (const folder of folders) {
    const heads = declaredImports(folder);
    if (heads.length !== 1) {
      wrong.push(`${folder}/: ${heads.length} files open with the folder's paragraph (one must)`);
      continue;
    }
    const [head] = heads as [{ file: string; imports: string[] }];
    const extra = (top.get(folder) ?? []).filter((to) => !head.imports.includes(to));
    if (extra.length) wrong.push(`${folder}/ imports ${extra.join(', ')}, which ${head.file} does not allow`);
  }
  assert.deepEqual(wrong, []);
  assert.deepEqual(
    readdirSync(LIBRARY).filter((n) => n.endsWith('.ts')),
    ['index.ts'],
    'only the entry point at the top',
  );
});

test('no top-level folder holds more than 30% of the library, and no folder more than 24 files of its own', () => {
  const files = sources(LIBRARY);
  const lines = (f: string) => readFileSync(f, 'utf8').split('\n').length;
  const total = files.reduce((n, f) => n + lines(f), 0);
  const byTop = new Map<string, number>();
  const byDir = new Map<string, number>();
  for (const f of files) {
    const rel = relative(LIBRARY, f);
    const topFolder = rel.includes('/') ? (rel.split('/')[0] as string) : '.';
    byTop.set(topFolder, (byTop.get(topFolder) ?? 0) + lines(f));
    byDir.set(dirname(rel), (byDir.get(dirname(rel)) ?? 0) + 1);
  }
  const heavy = [...byTop]
    .filter(([, n]) => n > 0.3 * total)
    .map(([d, n]) => `${d}: ${Math.round((100 * n) / total)}%`);
  const crowded = [...byDir].filter(([, n]) => n > 24).map(([d, n]) => `${d}: ${n} files`);
  assert.deepEqual([...heavy, ...crowded], []);
});

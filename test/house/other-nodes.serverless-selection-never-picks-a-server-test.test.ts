import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';

/**
 * `npm test` runs the tests that need no server on Node 22 and 24 too (scripts/other-nodes.mjs), chosen from their
 * imports by scripts/serverless-tests.mjs. A server test picked by mistake would start servers on the other lines
 * (slow) or fail there; this proves the choice on made-up test files, one for each way a test reaches a server, and
 * on the whole suite against another signal (a test calling a server harness by name is never picked).
 */
type Selector = {
  serverReason: (file: string) => string | null;
  testFiles: () => string[];
  serverlessTests: () => string[];
};
const selector = (await import(pathToFileURL(resolve('scripts/serverless-tests.mjs')).href)) as Selector;
const { otherNodeTests, EXAMPLES, MAIN_LINE_ONLY } = (await import(
  pathToFileURL(resolve('scripts/other-nodes.mjs')).href
)) as {
  otherNodeTests: () => string[];
  EXAMPLES: string[];
  MAIN_LINE_ONLY: string[];
};

// Made-up compiled tests live beside the real ones, so their relative imports reach the real support modules; they
// are named *.js, not *.test.js, so that a run never takes one for a test of the suite.
const dir = mkdtempSync(join(resolve('dist/test'), 'house-selection-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const support = (name: string) => `./${relative(dir, resolve('dist/test/support', name))}`;

function fixture(name: string, text: string): string {
  const file = join(dir, name);
  writeFileSync(file, text);
  return file;
}

describe('the server-less selection', () => {
  const serverTests: [string, string, RegExp][] = [
    [
      'imports the server harness',
      `import { useServers } from '${support('postgres.js')}';\nawait useServers(1);\n`,
      /imports packages\/embedded/,
    ],
    [
      'imports a helper of its own that imports the harness',
      `import { cluster } from './two-hops-helper.js';\nawait cluster();\n`,
      /imports packages\/embedded.*through/,
    ],
    [
      'imports the embedded package by name, dynamically',
      `const { startEmbeddedServers } = await import('@shardflake/embedded');\n`,
      /imports @shardflake\/embedded/,
    ],
    [
      'runs the demo',
      `spawnSync(process.execPath, ['packages/cli/dist/cli/main.js', 'demo']);\n`,
      /runs `demo …`/,
    ],
    [
      'runs a benchmark other than ids',
      `spawnSync(process.execPath, ['packages/cli/dist/cli/main.js', 'bench',\n  'inserts']);\n`,
      /runs `bench …`/,
    ],
    [
      "runs, through a helper of its own, a page's code blocks that start embedded servers",
      `import { runBlocks } from './spawning-helper.js';\nrunBlocks('docs/moves.md');\n`,
      /may run the code blocks of docs\/moves\.md/,
    ],
    [
      "runs a page's code blocks that start embedded servers",
      `const page = readFileSync('docs/moves.md', 'utf8');\nspawnSync(process.execPath, [write(page)]);\n`,
      /may run the code blocks of docs\/moves\.md/,
    ],
  ];
  mkdirSync(dir, { recursive: true });
  fixture('two-hops-helper.js', `export { useServers as cluster } from '${support('postgres.js')}';\n`);
  fixture('spawning-helper.js', `export const runBlocks = (page) => spawnSync(process.execPath, [page]);\n`);

  for (const [what, text, reason] of serverTests) {
    it(`never picks a test that ${what}`, () => {
      const file = fixture(`${what.replaceAll(/\W+/g, '-')}.js`, text);
      assert.match(selector.serverReason(file) ?? 'picked as server-less', reason);
    });
  }

  it('picks a test of the ids, the CLI id command and `bench ids`, or one reading a page without running it', () => {
    const ids = fixture(
      'ids.js',
      `import { createGenerator } from 'shardflake/ids';\nimport { decodeId } from 'shardflake';\n` +
        `spawnSync(process.execPath, ['packages/cli/dist/cli/main.js', 'bench',\n  'ids']);\n`,
    );
    assert.equal(selector.serverReason(ids), null);
    const reads = fixture('reads.js', `const json = readFileSync('docs/moves.md', 'utf8');\n`);
    assert.equal(selector.serverReason(reads), null);
  });

  it('never picks a test of the suite that calls a server harness by name', () => {
    const picked = new Set(selector.serverlessTests());
    const harness = /\b(useServers|startReplica|startPgBouncer|startEmbeddedServers|startEmbedded)\(/;
    const callers = selector.testFiles().filter((f) => harness.test(readFileSync(f, 'utf8')));
    assert.ok(callers.length > 50, `the suite has server tests (${callers.length})`);
    for (const file of callers) assert.ok(!picked.has(file), `${file} calls a server harness but was picked`);
    assert.ok(picked.size >= 20, `the suite has server-less tests (${picked.size})`);
  });

  it('runs on the other lines the server-less tests and each docs example it names, which exist', () => {
    const files = otherNodeTests();
    for (const example of EXAMPLES)
      assert.ok(
        files.some((f) => f.endsWith(`/dist/test/${example}`)),
        example,
      );
    const mainLineOnly = (file: string) => MAIN_LINE_ONLY.some((name) => file.endsWith(`/dist/test/${name}`));
    for (const name of MAIN_LINE_ONLY)
      assert.ok(
        selector.serverlessTests().some((f) => f.endsWith(`/dist/test/${name}`)),
        `${name} is a server-less test`,
      );
    for (const file of selector.serverlessTests())
      assert.equal(files.includes(file), !mainLineOnly(file), file);
  });
});

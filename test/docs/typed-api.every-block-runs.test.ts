import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { pageBlocks } from './blocks.js';

/**
 * docs/typed-api.md's example, run as written: its one TypeScript block is compiled with strict settings (so each
 * `@ts-expect-error` in it must meet its error, or the compile fails) and run; its output must be the block that
 * follows it. The folder sits in the repository so `shardflake`, `@shardflake/embedded` and `kysely` resolve as they
 * do for an application.
 */
test("docs/typed-api.md's example compiles strictly, runs, and prints what the page shows", () => {
  const blocks = pageBlocks('docs/typed-api.md', ['ts', '']).map((b) => ({ lang: b.kind, code: b.code }));
  const ts = blocks.filter((b) => b.lang === 'ts');
  assert.equal(ts.length, 1, 'one ts block');
  assert.deepEqual(
    blocks.map((b) => b.lang),
    ['ts', ''],
    'the page has the example and its output, and no block that nothing runs',
  );
  const dir = `.docs-typed-api-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  try {
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
    writeFileSync(join(dir, 'example.ts'), ts[0]?.code as string);
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noUncheckedIndexedAccess: true,
          skipLibCheck: true,
          types: ['node'],
          outDir: 'out',
        },
        files: ['example.ts'],
      }),
    );
    const tsc = spawnSync(join('node_modules', '.bin', 'tsc'), ['-p', join(dir, 'tsconfig.json')], {
      encoding: 'utf8',
    });
    assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
    const run = spawnSync(process.execPath, [join(dir, 'out', 'example.js')], {
      encoding: 'utf8',
      timeout: 180_000,
    });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, blocks[1]?.code);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

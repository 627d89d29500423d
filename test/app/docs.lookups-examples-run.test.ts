import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { outputAfter, pageBlocks } from '../docs/blocks.js';

// Every code block of docs/lookups.md runs as written and prints the output block that follows it.
// (Its config fragment is validated in test/docs/configs.validate.test.ts.)
const blocks = pageBlocks('docs/lookups.md', ['js', '']);
const examples = blocks
  .filter((b) => b.kind === 'js')
  .map((b) => ({ code: b.code, shown: outputAfter(b)?.code as string }));

test('docs/lookups.md: every js block has its output block', () => {
  assert.ok(examples.every((e) => e.shown !== undefined));
  assert.equal(blocks.length, 2 * examples.length, 'every plain block is the output of a js block');
  assert.ok(examples.length >= 2);
});

for (const [i, example] of examples.entries()) {
  test(`docs/lookups.md example ${i + 1} runs and prints what the page shows`, () => {
    const file = `.docs-lookups-example-${process.pid}-${i}.mjs`;
    writeFileSync(file, example.code);
    try {
      const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 180_000 });
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, example.shown);
    } finally {
      rmSync(file, { force: true });
    }
  });
}

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

// Every code block of docs/lookups.md runs as written and prints the output block that follows it.
const page = readFileSync('docs/lookups.md', 'utf8');
const examples = [...page.matchAll(/```js\n([\s\S]*?)```\n\n```\n([\s\S]*?)```/g)].map((m) => ({
  code: m[1] as string,
  shown: m[2] as string,
}));

test('docs/lookups.md: every js block has its output block', () => {
  assert.equal(examples.length, (page.match(/```js\n/g) ?? []).length);
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

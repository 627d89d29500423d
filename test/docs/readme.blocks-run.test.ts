import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertSameOutput, outputAfter, pageBlocks, runModule, where } from './blocks.js';

// README.md: its example runs as written (it starts two embedded servers) and prints what the README shows; the
// block after it is that output and nothing else. Its shell commands are checked in commands.checked.test.ts.
const [example, ...others] = pageBlocks('README.md', ['js', 'text']);

test("the README's example runs and prints what the README shows", () => {
  assert.ok(example && example.kind === 'js', 'the README has a js example');
  const shown = outputAfter(example);
  assert.ok(shown, 'followed by its output');
  assert.deepEqual(
    others.map((b) => b.index),
    [shown.index],
    'no other js or text block',
  );
  assertSameOutput(runModule(example), shown.code, where(example));
});

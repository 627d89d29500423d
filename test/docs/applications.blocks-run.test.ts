import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertSameOutput, outputAfter, pageBlocks, runModule, where } from './blocks.js';

// docs/applications.md: its example (sessions, Kysely, Drizzle, insertMany, cross-shard reads; two embedded
// servers) runs as written and prints what the page shows; every output block belongs to it. Its fragments are
// type-checked in fragments.typecheck.test.ts, its recorded session in commands.checked.test.ts.
const blocks = pageBlocks('docs/applications.md', ['js', '']);

test('docs/applications.md: the example runs and prints what the page shows', () => {
  const examples = blocks.filter((b) => b.kind === 'js');
  assert.equal(examples.length, 1);
  const example = examples[0] as (typeof examples)[number];
  const shown = outputAfter(example);
  assert.ok(shown, 'followed by its output');
  assert.deepEqual(
    blocks.filter((b) => b.kind === '').map((b) => b.index),
    [shown.index],
  );
  assertSameOutput(runModule(example), shown.code, where(example));
});

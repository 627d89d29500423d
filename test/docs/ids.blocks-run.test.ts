import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertSameOutput, outputAfter, pageBlocks, runModule, runSession, where } from './blocks.js';

// docs/ids.md: the js examples run and print what the page shows (an id made now, such as the LSID that
// `lsid.generate` prints, only has to have the shown length); the terminal sessions run the CLI and print what the
// page shows, ids made by `id new` again only by their length.
const LSID = /^[0-9a-z]{5}-[0-9a-z]{8}-[0-9a-z]{4}-[0-9a-z]{2}$/;

for (const block of pageBlocks('docs/ids.md', ['js'])) {
  test(`${where(block)} runs and prints what the page shows`, () => {
    const shown = outputAfter(block);
    assert.ok(shown, `${where(block)} is followed by its output`);
    assertSameOutput(runModule(block), shown.code, where(block), (line) => LSID.test(line));
  });
}

test('docs/ids.md: every block after a js example is its output', () => {
  const outputs = pageBlocks('docs/ids.md', ['text']);
  const examples = pageBlocks('docs/ids.md', ['js']);
  assert.deepEqual(
    outputs.map((b) => b.index),
    examples.map((b) => b.index + 1),
  );
});

for (const block of pageBlocks('docs/ids.md', ['console'])) {
  test(`${where(block)}: the commands print what the page shows`, () => {
    runSession(block, { varies: (command) => / id new /.test(` ${command}`) });
  });
}

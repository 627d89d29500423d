import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { pageBlocks } from '../docs/blocks.js';

// docs/moves.md: its example runs as written and prints what the page shows (run inside the package directory so
// `import … from 'shardflake'` resolves). It is the page's only example besides the output it shows.
test('the example of docs/moves.md runs and prints what the page shows', () => {
  // The page's commands and recorded sessions are checked in test/docs/commands.checked.test.ts.
  const blocks = pageBlocks('docs/moves.md', ['js', '']);
  assert.deepEqual(
    blocks.map((b) => b.kind),
    ['js', ''],
    'one js example and its output',
  );
  const [code, shown] = [blocks[0]?.code as string, blocks[1]?.code as string];
  const file = `.docs-moves-example-${process.pid}.mjs`;
  writeFileSync(file, code);
  try {
    const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 180_000 });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout, shown);
  } finally {
    rmSync(file, { force: true });
  }
});

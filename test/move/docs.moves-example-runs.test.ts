import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

// docs/moves.md: its example runs as written and prints what the page shows (run inside the package directory so
// `import … from 'shardflake'` resolves). It is the page's only code block besides the output it shows.
test('the example of docs/moves.md runs and prints what the page shows', () => {
  const page = readFileSync('docs/moves.md', 'utf8');
  const blocks = [...page.matchAll(/```(\w*)\n([\s\S]*?)```/g)];
  assert.deepEqual(
    blocks.map((b) => b[1]),
    ['js', ''],
    'one js example and its output',
  );
  const [code, shown] = [blocks[0]?.[2] as string, blocks[1]?.[2] as string];
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

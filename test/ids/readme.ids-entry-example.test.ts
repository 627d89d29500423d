import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

// The README's `shardflake/ids` example ("A guest in your process") is run as written, inside the package
// directory so that `import … from 'shardflake/ids'` resolves (Node's self-reference), and prints what it shows.
test("the README's shardflake/ids example runs and prints what the README shows", () => {
  const readme = readFileSync('README.md', 'utf8');
  const match = /```js\n(\/\/ readme:ids-entry\n[\s\S]*?)```\n\n```text\n([\s\S]*?)```/.exec(readme);
  assert.ok(match, 'the README has the shardflake/ids example and its output');
  const [, code, output] = match as unknown as [string, string, string];
  const file = `.readme-ids-entry-${process.pid}.mjs`;
  writeFileSync(file, code);
  try {
    const result = spawnSync(process.execPath, [file], { encoding: 'utf8' });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout, output);
  } finally {
    rmSync(file, { force: true });
  }
});

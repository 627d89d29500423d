import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

// The README's application example (sessions, Kysely, Drizzle, insertMany, cross-shard reads) runs as written and
// prints what the README shows. It runs inside the package directory so `import … from 'shardflake'` resolves.
test("the README's applications example runs and prints what the README shows", () => {
  const readme = readFileSync('README.md', 'utf8');
  const section = readme.slice(
    readme.indexOf('<!-- section:app -->'),
    readme.indexOf('<!-- /section:app -->'),
  );
  const code = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  const shown = /```js\n[\s\S]*?```\n\n```\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(code && shown, 'the applications section has a js example followed by its output');
  const file = `.readme-app-example-${process.pid}.mjs`;
  writeFileSync(file, code);
  try {
    const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout, shown);
  } finally {
    rmSync(file, { force: true });
  }
});

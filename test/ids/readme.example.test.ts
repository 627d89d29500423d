import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';

// The README's library example is run as written, so it cannot rot. It must run inside the package directory
// for `import … from 'shardflake'` to resolve (Node's self-reference).
test("the README's ids example runs and prints what the README shows for the fixed inputs", () => {
  const readme = readFileSync('README.md', 'utf8');
  const section = readme.slice(
    readme.indexOf('<!-- section:ids -->'),
    readme.indexOf('<!-- /section:ids -->'),
  );
  const code = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(code, 'the ids section has a js example');
  const file = `.readme-ids-example-${process.pid}.mjs`;
  writeFileSync(file, code);
  try {
    const result = spawnSync(process.execPath, [file], { encoding: 'utf8' });
    assert.equal(result.status, 0, result.stderr);
    for (const line of [
      'bigint { shard: 5, sequence: 0 }',
      'timestamp: 2016-04-30T11:18:25.796Z',
      '2217813737473025833n',
      '2046-06-27T17:00:49.497Z 2081-04-30T12:54:37.273Z',
      '2dpbqYax89p 1XHT1V000Z9S9',
      '19293 12820 209 2022-10-28T00:10:18.4531270Z',
      '00jtx-05ra0xa6-0cgm-6h 0012d740-5c28-81d5-8603-214344000000 0012d7405c281d5180c850d1',
      '2022-02-22T19:22:22.000Z',
      'base62 2016-04-30T11:18:25.796Z 175928847299117063 1 0 7',
      'base32 2016-04-30T11:18:25.796Z 175928847299117063 1 0 7',
    ]) {
      assert.ok(result.stdout.includes(line), `output lacks ${line}`);
    }
  } finally {
    rmSync(file, { force: true });
  }
});

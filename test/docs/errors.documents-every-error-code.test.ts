import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { ERROR_CODES } from 'shardflake';

// docs/errors.md's table of ShardflakeError codes lists every code the library has, and only those (its second
// table, of SQLSTATEs, is not codes).
test('the error table of docs/errors.md lists every error code, and only those', async () => {
  const page = await readFile('docs/errors.md', 'utf8');
  const documented = [...page.matchAll(/^\| `([A-Z_]+)` \|/gm)].map((m) => m[1]);
  assert.deepEqual([...documented].sort(), [...ERROR_CODES].sort());
});

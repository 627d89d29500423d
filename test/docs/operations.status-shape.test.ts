import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { makeCluster, rawConfig } from '../move/fixture.js';
import { CLI_MAIN } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { pageBlocks, where } from './blocks.js';

// docs/operations.md sketches the JSON of `cluster status --json` (values elided with …, so it is not JSON): every
// field it names is a field the command prints on a real cluster.
const [shape] = pageBlocks('docs/operations.md', ['json shape']);
const dir = mkdtempSync(join(tmpdir(), 'shardflake-docs-status-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Every key of a JSON value, at any depth. */
function keysOf(value: unknown, into = new Set<string>()): Set<string> {
  if (Array.isArray(value)) for (const v of value) keysOf(v, into);
  else if (value && typeof value === 'object')
    for (const [k, v] of Object.entries(value)) {
      into.add(k);
      keysOf(v, into);
    }
  return into;
}

test('every field of the status sketch in docs/operations.md is one `cluster status --json` prints', async () => {
  assert.ok(shape);
  const servers = await useServers(1);
  await makeCluster(servers, 4);
  writeFileSync(join(dir, 'cluster.json'), JSON.stringify(rawConfig(servers, 4)));
  const r = spawnSync(
    process.execPath,
    [CLI_MAIN, 'cluster', 'status', '--config', 'cluster.json', '--json'],
    {
      cwd: dir,
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  assert.equal(r.status, 0, r.stderr);
  const printed = keysOf(JSON.parse(r.stdout));
  const sketched = [...shape.code.matchAll(/"(\w+)":/g)].map((m) => m[1] as string);
  assert.ok(sketched.length > 20, `${where(shape)} names the fields`);
  assert.deepEqual(
    sketched.filter((k) => !printed.has(k)),
    [],
    `fields of ${where(shape)} that the command does not print`,
  );
});

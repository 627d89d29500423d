import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

test('bench ids --report writes a self-contained HTML report with a rendered bar chart', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-report-'));
  try {
    const file = join(dir, 'ids.html');
    const run = spawnSync(
      process.execPath,
      [
        'packages/cli/dist/cli/main.js',
        'bench',
        'ids',
        '--duration',
        '30',
        '--rounds',
        '1',
        '--only',
        'instagram',
        '--json',
        '--report',
        file,
      ],
      { encoding: 'utf8' },
    );
    assert.equal(run.status, 0, run.stderr);
    const json = JSON.parse(run.stdout) as { entries: { name: string; duplicates: number }[] };
    assert.equal(json.entries[0]?.name, 'shardflake instagram');
    const html = await readFile(file, 'utf8');
    assert.match(html, /<svg[^>]*>/);
    assert.match(html, /ids per second/);
    assert.doesNotMatch(html, /<script/i, 'the report carries no scripts');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { MoveBenchResult } from '../../packages/cli/src/bench/move.js';
import { startCli } from '../support/cli.js';

test('bench move --report writes an HTML report charting copy rate and write latency against their targets', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-report-'));
  try {
    const file = join(dir, 'move.html');
    const run = await startCli(['bench', 'move', '--rows', '2000', '--json', '--report', file]).done;
    assert.equal(run.code, 0, run.stderr);
    assert.ok(run.stderr.includes(`report: ${file}\n`), run.stderr);
    const result = JSON.parse(run.stdout) as MoveBenchResult;
    assert.deepEqual(
      result.runs.map((r) => r.verify),
      ['in-pause', 'snapshots'],
    );

    const html = await readFile(file, 'utf8');
    assert.doesNotMatch(html, /<script/i, 'the report carries no scripts');
    const [copy, latency, ...more] = html.match(/<svg[\s\S]*?<\/svg>/g) ?? [];
    assert.equal(more.length, 0);
    // Each bar is labelled with its figure (vega writes it into the bar's aria-label): the chart shows this run.
    const bar = (label: string, value: number) => `label: ${label}; value: ${value}"`;
    assert.match(copy ?? '', /initial copy/);
    assert.ok(copy?.includes('aria-label="value: 100000"'), 'the copy target is drawn');
    assert.match(latency ?? '', /insert latency/);
    assert.match(latency ?? '', /for a log scale/);
    assert.ok(latency?.includes('aria-label="value: 500"'), 'the pause target is drawn');
    for (const r of result.runs) {
      assert.ok(copy?.includes(bar(r.verify, r.copy.rowsPerSecond)), `copy bar of ${r.verify}`);
      for (const [label, value] of [
        ['normal p50', r.writer.normal.p50Ms],
        ['normal p99', r.writer.normal.p99Ms],
        ['move p50', r.writer.duringMove.p50Ms],
        ['move p99', r.writer.duringMove.p99Ms],
        ['move, longest', r.pause.longestWriteMs],
      ] as const) {
        assert.ok(latency?.includes(bar(`${r.verify}: ${label}`, value)), `${r.verify}: ${label} bar`);
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

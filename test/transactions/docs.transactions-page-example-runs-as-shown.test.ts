import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { pageBlocks } from '../docs/blocks.js';

// Every code block of docs/transactions.md runs: the js example as written (printing what the page shows after
// it), the sh commands against a real cluster (their output, with timings normalised, is the page's).
const blocks = pageBlocks('docs/transactions.md', ['js', 'sh', 'text']).map((b) => ({
  lang: b.kind,
  code: b.code,
}));
const dir = mkdtempSync(join(tmpdir(), 'shardflake-docs-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The block after `i`, which must be the text it prints. */
function shown(i: number): string {
  const next = blocks[i + 1];
  assert.equal(next?.lang, 'text', `block ${i} (${blocks[i]?.lang}) is followed by its output`);
  return next?.code ?? '';
}

test('docs/transactions.md: every block is an example, a command or the output of the one before', () => {
  assert.ok(blocks.length >= 4);
  blocks.forEach((b, i) => {
    assert.ok(['js', 'sh', 'text'].includes(b.lang), `block ${i} has a language this test runs: ${b.lang}`);
    if (b.lang === 'text')
      assert.ok(['js', 'sh'].includes(blocks[i - 1]?.lang ?? ''), `text block ${i} follows code`);
  });
});

test('docs/transactions.md: the js examples run and print what the page shows', () => {
  blocks.forEach((b, i) => {
    if (b.lang !== 'js') return;
    // In the package directory, so `import … from 'shardflake'` resolves (Node's self-reference).
    const file = `.docs-transactions-${process.pid}-${i}.mjs`;
    writeFileSync(file, b.code);
    try {
      const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 200_000 });
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, shown(i));
    } finally {
      rmSync(file, { force: true });
    }
  });
});

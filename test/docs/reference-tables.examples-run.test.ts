import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { pageBlocks } from './blocks.js';

// Every code block of docs/reference-tables.md is executed: each js block runs as written (inside the package
// directory, so `import … from 'shardflake'` resolves) and prints the plain block that follows it; each json block
// is a config the validator accepts.
const blocks = pageBlocks('docs/reference-tables.md', ['js', 'json', '']).map((b) => ({
  lang: b.kind,
  text: b.code,
}));

test('docs/reference-tables.md has only blocks this test can execute', () => {
  assert.ok(blocks.length >= 3);
  for (const [i, b] of blocks.entries()) {
    const isOutput = b.lang === '' && blocks[i - 1]?.lang === 'js';
    assert.ok(
      ['js', 'json'].includes(b.lang) || isOutput,
      `block ${i} (${b.lang || 'plain'}) is not executed`,
    );
  }
});

test('its json config validates, reference tables and migrations included', () => {
  for (const b of blocks.filter((x) => x.lang === 'json')) {
    const config = validateConfig(JSON.parse(b.text), 'docs/reference-tables.md');
    assert.ok(config.referenceTables.length > 0);
  }
});

test('its js examples run and print what the page shows', () => {
  blocks.forEach((b, i) => {
    if (b.lang !== 'js') return;
    const shown = blocks[i + 1];
    assert.ok(shown && shown.lang === '', `js block ${i} is followed by its output`);
    const file = `.docs-reference-example-${process.pid}-${i}.mjs`;
    writeFileSync(file, b.text);
    try {
      const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 180_000 });
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, shown.text);
    } finally {
      rmSync(file, { force: true });
    }
  });
});

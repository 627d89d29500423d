import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isShardflakeError } from 'shardflake';
import { pageBlocks } from '../docs/blocks.js';
import { CLI_MAIN } from '../support/cli.js';
import { sameAsOneTable, sqlFixture } from './fixture.js';

/**
 * Every code block of docs/sql.md runs: the JavaScript example prints what the page shows; the CLI example prints
 * the table shown (on the test's cluster); each `sql` block is answered as one table would answer it; each
 * `sql refused` block is refused with UNSUPPORTED_QUERY.
 */
const blocks = pageBlocks('docs/sql.md', ['js', '', 'sh', 'sql', 'sql refused']).map((b) => ({
  lang: b.kind,
  code: b.code,
}));
const f = await sqlFixture();
after(async () => {
  await f.router.close();
  await f.plain.end();
});

/** The block after the one of language `lang`: its output. */
function withOutput(lang: string): { code: string; output: string } {
  const at = blocks.findIndex((b) => b.lang === lang);
  assert.ok(
    at !== -1 && blocks[at + 1]?.lang === '',
    `docs/sql.md has a ${lang} block followed by its output`,
  );
  return { code: (blocks[at] as { code: string }).code, output: (blocks[at + 1] as { code: string }).code };
}

describe('docs/sql.md', () => {
  it('the JavaScript example prints what the page shows', async () => {
    const { code, output } = withOutput('js');
    const file = `.docs-sql-example-${process.pid}.mjs`;
    await writeFile(file, code);
    try {
      const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 120_000 });
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, output);
    } finally {
      await rm(file, { force: true });
    }
  });

  it('the command-line example prints the table shown', async () => {
    const { code, output } = withOutput('sh');
    const dir = await mkdtemp(join(tmpdir(), 'shardflake-docs-sql-'));
    await writeFile(join(dir, 'cluster.json'), JSON.stringify(f.configFile));
    const command = code
      .trim()
      .replace(/^shardflake /, `${JSON.stringify(process.execPath)} ${JSON.stringify(CLI_MAIN)} `);
    const result = spawnSync('bash', ['-c', command], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout, output);
  });

  it('every sql block is answered as one table would, every refused one is refused', async () => {
    const answered = blocks.filter((b) => b.lang === 'sql');
    const refused = blocks.filter((b) => b.lang === 'sql refused');
    assert.ok(answered.length >= 8 && refused.length >= 8);
    for (const { code } of answered) await sameAsOneTable(f, code.trim(), [], /ORDER BY/.test(code));
    for (const { code } of refused)
      await assert.rejects(f.router.sql(code.trim()), (e) => isShardflakeError(e, 'UNSUPPORTED_QUERY'), code);
  });
});

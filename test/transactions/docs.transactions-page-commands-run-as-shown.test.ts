import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { pageBlocks } from '../docs/blocks.js';
import { CLI_MAIN } from '../support/cli.js';
import { useServers } from '../support/postgres.js';

// The sh blocks of docs/transactions.md run against a real cluster and print the lines the page shows after them
// (timings normalised; cluster verify also prints the checks of other features).
const blocks = pageBlocks('docs/transactions.md', ['sh', 'text']).map((b) => ({
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

test('docs/transactions.md: the commands run on a cluster and print what the page shows', async () => {
  const servers = await useServers(2);
  const raw = {
    servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
    catalog: 'a',
    logicalShards: 4,
    tables: { wallets: 'CREATE TABLE wallets (owner text PRIMARY KEY, balance bigint NOT NULL)' },
  };
  await initCluster(validateConfig(raw, 'docs'));
  writeFileSync(join(dir, 'cluster.json'), JSON.stringify(raw));
  blocks.forEach((b, i) => {
    if (b.lang !== 'sh') return;
    let out = '';
    for (const line of b.code.split('\n').filter((l) => l.trim())) {
      assert.match(line, /^npx shardflake /);
      const args = line.replace(/^npx shardflake /, '').split(/\s+/);
      const result = spawnSync(process.execPath, [CLI_MAIN, ...args], {
        cwd: dir,
        encoding: 'utf8',
        timeout: 60_000,
      });
      assert.equal(result.status, 0, `${line}: ${result.stderr}`);
      out += result.stdout;
    }
    // Every line the page shows is printed, in order; other features' verify checks add lines of their own.
    const lines = out.replace(/\(\d+ ms\)/g, '(N ms)').split('\n');
    let at = 0;
    for (const line of shown(i)
      .split('\n')
      .filter((l) => l)) {
      const found = lines.indexOf(line, at);
      assert.ok(found >= 0, `the output has "${line}" (in order):\n${out}`);
      at = found + 1;
    }
    assert.ok(!/^FAIL/m.test(out), out);
  });
});

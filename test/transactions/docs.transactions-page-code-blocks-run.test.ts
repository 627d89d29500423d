import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { validateConfig } from '../../packages/shardflake/src/cluster/config.js';
import { initCluster } from '../../packages/shardflake/src/cluster/init.js';
import { CLI_MAIN } from '../support/cli.js';
import { useServers } from '../support/postgres.js';

// Every code block of docs/transactions.md runs: the js example as written (printing what the page shows after
// it), the sh commands against a real cluster (their output, with timings normalised, is the page's).
const page = readFileSync('docs/transactions.md', 'utf8');
const blocks = [...page.matchAll(/```(\w*)\n([\s\S]*?)```/g)].map((m) => ({
  lang: m[1] ?? '',
  code: m[2] ?? '',
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
      const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 120_000 });
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, shown(i));
    } finally {
      rmSync(file, { force: true });
    }
  });
});

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
    assert.equal(out.replace(/\(\d+ ms\)/g, '(N ms)'), shown(i));
  });
});

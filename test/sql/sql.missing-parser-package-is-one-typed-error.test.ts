import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { pathToFileURL } from 'node:url';

/**
 * libpg-query and pgsql-deparser are optional peer dependencies of `shardflake` (≈ 3 MB an app without cross-shard
 * reads should not carry). An app that calls router.sql without them gets MISSING_PACKAGE naming the one command
 * that installs them — on the first call and again on the next (a failed load is not cached as if it had worked),
 * never a bare ERR_MODULE_NOT_FOUND. The package is made absent exactly: a resolve hook in a child process answers
 * ERR_MODULE_NOT_FOUND for it, as Node does when the folder is missing.
 */
const temp = await mkdtemp(join(tmpdir(), 'shardflake-missing-'));
after(() => rm(temp, { recursive: true, force: true }));

const dist = (file: string) => pathToFileURL(resolve('packages/shardflake/dist', file)).href;

async function runWithout(absent: string): Promise<string[]> {
  const hooks = join(temp, `hide-${absent}.mjs`);
  await writeFile(
    hooks,
    `export async function resolve(specifier, context, next) {
  if (specifier === ${JSON.stringify(absent)}) {
    throw Object.assign(new Error("Cannot find package '" + specifier + "'"), { code: 'ERR_MODULE_NOT_FOUND' });
  }
  return next(specifier, context);
}
`,
  );
  const main = join(temp, `main-${absent}.mjs`);
  await writeFile(
    main,
    `import { register } from 'node:module';
register(${JSON.stringify(pathToFileURL(hooks).href)});
const { parseSelect } = await import(${JSON.stringify(dist('sql/parser.js'))});
const { isShardflakeError } = await import(${JSON.stringify(dist('index.js'))});
for (let i = 0; i < 2; i++) {
  try {
    await parseSelect('SELECT 1');
    console.log('parsed');
  } catch (error) {
    console.log(isShardflakeError(error) ? error.code + ' ' + error.message : 'untyped ' + error);
  }
}
`,
  );
  const r = spawnSync(process.execPath, [main], { cwd: process.cwd(), encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim().split('\n');
}

for (const absent of ['libpg-query', 'pgsql-deparser']) {
  test(`without ${absent}, router.sql's parser fails with MISSING_PACKAGE naming the install, twice`, async () => {
    const lines = await runWithout(absent);
    const expected = `MISSING_PACKAGE router.sql needs the package ${absent}, which is not installed: npm install libpg-query@18 pgsql-deparser@18`;
    assert.deepEqual(lines, [expected, expected]);
  });
}

test('with both installed (the repo), the same parser parses', async () => {
  const lines = await runWithout('no-such-package-hidden');
  assert.deepEqual(lines, ['parsed', 'parsed']);
});

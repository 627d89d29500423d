// Runs every compiled test file with Node's test runner. Files run three at a time on this 2-core machine: a file
// spends part of its time waiting (for its servers to start, for a bound or a sleep to pass), and a third file
// fills those waits. Each integration test file starts its own PostgreSQL servers, so they never share state.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

function findTests(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return findTests(path);
    return name.endsWith('.test.js') ? [path] : [];
  });
}

// `tsc -b` never deletes the output of a renamed or removed test: a compiled test whose source is gone is stale
// and is not run.
const hasSource = (compiled) => existsSync(compiled.replace(/^dist[\\/]/, '').replace(/\.js$/, '.ts'));

// Any number of filters: a file runs when its path contains one of them (none: every file).
const filters = process.argv.slice(2);
const files = findTests('dist/test')
  .filter(hasSource)
  .filter((f) => filters.length === 0 || filters.some((filter) => f.includes(filter)))
  .sort();
// With no file, `node --test` would look for tests itself, everywhere below the current folder.
if (files.length === 0) {
  console.error(
    `run-tests: no compiled test matches ${filters.join(', ') || 'dist/test'} (did the build run?)`,
  );
  process.exit(1);
}
// A test that hangs (a lock never released, a server that never answers) fails after 4 minutes instead of
// holding the whole run.
const args = ['--test', '--test-concurrency=3', '--test-timeout=240000', '--test-reporter=spec', ...files];
const result = spawnSync(process.execPath, args, {
  stdio: 'inherit',
  env: { ...process.env, SHARDFLAKE_TEST: '1' },
});
process.exit(result.status ?? 1);

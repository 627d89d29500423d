import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

/**
 * Issue 32, item 6: the packed tarballs carried no README and no LICENSE (npm takes them from the package's own
 * folder, not the repository's root). Each package is packed as npm would publish it (`npm pack --dry-run`, its
 * file list) and must hold its README.md, naming the package, and the repository's LICENSE, word for word.
 */
const PACKAGES = {
  'packages/shardflake': 'shardflake',
  'packages/cli': '@shardflake/cli',
  'packages/embedded': '@shardflake/embedded',
};
const license = readFileSync('LICENSE', 'utf8');

for (const [dir, name] of Object.entries(PACKAGES)) {
  test(`the tarball of ${name} holds README.md and LICENSE`, () => {
    const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: dir,
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    const packed = JSON.parse(r.stdout) as { name: string; files: { path: string }[] }[];
    assert.equal(packed[0]?.name, name);
    const files = new Set(packed[0]?.files.map((f) => f.path));
    assert.ok(files.has('README.md'), `${name}: README.md is packed`);
    assert.ok(files.has('LICENSE'), `${name}: LICENSE is packed`);
    assert.match(readFileSync(`${dir}/README.md`, 'utf8'), new RegExp(`^# ${name.replace('/', '\\/')}\\n`));
    assert.equal(readFileSync(`${dir}/LICENSE`, 'utf8'), license, `${name}: the repository's license`);
  });
}

test("the library's README and the repository's say that a TypeScript app needs @types/pg", () => {
  for (const readme of ['README.md', 'packages/shardflake/README.md'])
    assert.match(readFileSync(readme, 'utf8'), /npm install -D @types\/pg/, readme);
});

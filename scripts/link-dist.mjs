// After `tsc -b`: each package's compiled code is in its own folder (packages/<name>/dist, what `npm pack` ships),
// while the tests, compiled to dist/test, import the packages' sources by relative path
// (`../../packages/shardflake/src/…`). dist/packages/<name>/src is made a link to packages/<name>/dist so those
// paths resolve at run time; Node loads a module by its real path, so a test's relative import and the `shardflake`
// package name reach one and the same module (one ShardflakeError class, one pool registry).
import { mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

for (const name of ['shardflake', 'embedded', 'cli']) {
  const link = join('dist', 'packages', name, 'src');
  const target = join('packages', name, 'dist');
  mkdirSync(dirname(link), { recursive: true });
  rmSync(link, { recursive: true, force: true });
  symlinkSync(relative(dirname(link), target), link, 'dir');
}

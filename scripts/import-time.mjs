// How long `import('shardflake')` and `import('shardflake/ids')` take in a fresh Node process, measured as
// docs/benchmarks.md describes (performance.now() around a dynamic import in `node -e`), next to an empty module as
// the baseline (what any first dynamic import costs: Node's ES module loader starting up). Each run is a new
// process, so every import is cold; the entries are interleaved so that other work on the machine hits each
// alike. CPU time (process.cpuUsage) is printed too: on a busy machine the wall time mostly measures waiting for
// a core.
// Usage: node scripts/import-time.mjs [runs] [folder …]   (run it after `npm run build`)
// Each folder given adds `shardflake/ids` as imported from that folder (its node_modules/shardflake): put the build
// before a change and the one after it side by side, each with its package.json and dist, to compare them in one
// interleaved run.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';

const runs = Number(process.argv[2] ?? 15);
const temp = mkdtempSync(join(tmpdir(), 'shardflake-import-time-'));
const empty = join(temp, 'empty.mjs');
writeFileSync(empty, 'export {};\n');
const entries = {
  'empty module': pathToFileURL(empty).href,
  shardflake: 'shardflake',
  'shardflake/ids': 'shardflake/ids',
};
const folders = Object.fromEntries(
  process.argv.slice(3).map((folder) => [`ids in ${basename(folder)}`, folder]),
);
for (const name of Object.keys(folders)) entries[name] = 'shardflake/ids';

const times = Object.fromEntries(Object.keys(entries).map((name) => [name, []]));
const loadStart = loadavg()[0];
for (let run = 0; run < runs; run++) {
  for (const [name, specifier] of Object.entries(entries)) {
    const script = `const c = process.cpuUsage(); const t = performance.now(); await import(${JSON.stringify(specifier)}); const wall = performance.now() - t; const u = process.cpuUsage(c); process.stdout.write(JSON.stringify([wall, (u.user + u.system) / 1000]));`;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
      cwd: folders[name],
    });
    if (child.status !== 0) throw new Error(`${name}: ${child.stderr}`);
    times[name].push(JSON.parse(child.stdout));
  }
}
rmSync(temp, { recursive: true, force: true });

const ms = (v) => `${v.toFixed(1)} ms`;
console.log(
  `node ${process.version}, ${runs} cold runs each, load average ${loadStart.toFixed(1)} → ${loadavg()[0].toFixed(1)}`,
);
const summary = (list) => {
  const sorted = [...list].sort((a, b) => a - b);
  return `median ${ms(sorted[Math.floor(sorted.length / 2)]).padStart(9)}  min ${ms(sorted[0]).padStart(9)}  max ${ms(sorted.at(-1)).padStart(9)}`;
};
for (const [name, list] of Object.entries(times)) {
  console.log(
    `${name.padEnd(15)} wall ${summary(list.map(([wall]) => wall))}   cpu ${summary(list.map(([, cpu]) => cpu))}`,
  );
}

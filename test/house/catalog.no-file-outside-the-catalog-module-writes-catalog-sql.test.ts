import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';

const ROOT = new URL('../../../', import.meta.url).pathname;
/** Every package's sources: the library, the CLI (with bench and dashboard) and the embedded servers. */
const SRCS = ['packages/shardflake/src', 'packages/cli/src', 'packages/embedded/src'].map((p) =>
  join(ROOT, p),
);

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

/** Code without its comments (line comments, block comments), so prose about a table does not count. */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

/** A statement naming a catalog table: after a SQL keyword or inside a regclass/nextval argument. */
const CATALOG_SQL =
  /\b(?:FROM|INTO|UPDATE|JOIN|TABLE|SEQUENCE|EXISTS|ON)\s+shardflake\.[a-z_]+|(?:regclass|nextval)\(\s*'shardflake\.[a-z_]+|'shardflake\.[a-z_]+'::regclass/gi;

/** Text a person reads, not SQL the code runs: the demo's hint of what to type into psql. */
const ALLOWED = new Map([['packages/cli/src/cli/commands/demo.ts', 1]]);

test('no file outside src/catalog/ holds a statement on a shardflake.* table (the catalog module owns them all)', () => {
  const files = SRCS.flatMap(sources);
  assert.ok(files.length > 50, `read ${files.length} source files`);
  const offenders: string[] = [];
  let inCatalog = 0;
  for (const file of files) {
    const path = relative(ROOT, file);
    const found = code(readFileSync(file, 'utf8')).match(CATALOG_SQL) ?? [];
    if (path.startsWith('packages/shardflake/src/catalog/')) {
      inCatalog += found.length;
      continue;
    }
    if (found.length > (ALLOWED.get(path) ?? 0)) offenders.push(`${path}: ${found.join(' | ')}`);
  }
  assert.deepEqual(offenders, [], 'catalog SQL outside the catalog module');
  // The pattern does find catalog SQL where it is: a pattern that matched nothing would prove nothing.
  assert.ok(inCatalog >= 20, `statements found in the catalog module: ${inCatalog}`);
});

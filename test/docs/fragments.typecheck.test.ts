import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type Block, pageBlocks } from './blocks.js';

/**
 * The `ts` blocks of the docs that are fragments (they use a `router` or a `config` made elsewhere) are
 * type-checked strictly, all in one compile: each becomes a module of its own in a folder inside the repository,
 * so `shardflake`, `kysely`, `drizzle-orm` and `@electric-sql/pglite` resolve as in an application, beside a
 * declaration of the names the fragments use without defining them (a fragment that defines one shadows it).
 */
const GLOBALS = `import type { Pool } from 'pg';
import type { ClusterConfig, Router, ShardflakeId } from 'shardflake';

declare global {
  const router: Router;
  const config: ClusterConfig;
  const url: string;
  const someId: ShardflakeId;
  const userId: ShardflakeId;
  const followedUserIds: bigint[];
  const catalogPool: Pool;
}
`;

const fragments: Block[] = [
  ...pageBlocks('docs/next-id.md', ['ts']),
  ...pageBlocks('docs/cluster.md', ['ts']),
  ...pageBlocks('docs/operations.md', ['ts']),
  ...pageBlocks('docs/applications.md', ['ts']),
  ...pageBlocks('docs/across-shards.md', ['ts']),
  ...pageBlocks('docs/adopt.md', ['ts']),
];

test('every TypeScript fragment of the docs type-checks strictly', () => {
  const dir = `.docs-fragments-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  try {
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
    writeFileSync(join(dir, 'globals.d.ts'), GLOBALS);
    const files = fragments.map((b) => {
      const name = `${b.page.replace(/\W/g, '_')}_line_${b.line}.ts`;
      // `export {}` makes a fragment without imports a module too, where top-level await is allowed.
      writeFileSync(join(dir, name), `${b.code}\nexport {};\n`);
      return name;
    });
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          // What an application's tsconfig usually says (no noUncheckedIndexedAccess).
          strict: true,
          skipLibCheck: true,
          noEmit: true,
          types: ['node'],
          // Fragments show calls; a value they compute and do not use is fine.
          noUnusedLocals: false,
        },
        files: ['globals.d.ts', ...files],
      }),
    );
    const tsc = spawnSync(join('node_modules', '.bin', 'tsc'), ['-p', join(dir, 'tsconfig.json')], {
      encoding: 'utf8',
    });
    // tsc names the file and line of each error: `<page>_line_<fence line>.ts(<line in the block>,…)`.
    assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

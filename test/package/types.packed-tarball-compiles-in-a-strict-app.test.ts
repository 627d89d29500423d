import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { PUBLISHED_PACKAGE_DIR } from '../support/published-package.js';

/**
 * The published types compile where they ship: the package is packed as npm would publish it, installed into an
 * empty app with nothing but TypeScript, and the app's strict `tsc` — without skipLibCheck, so every .d.ts of ours
 * and of what they import is checked — must pass. `shardflake/ids` needs no other types. The router's .d.ts name
 * pg's types, which come from `@types/pg`: an optional peer (as drizzle-orm has it), so an app's production image
 * does not carry type packages (2.8 MB of @types/node with them). A TypeScript app adds it as a dev dependency, as
 * docs/packages.md says; without it, strict tsc names the missing declarations instead of passing with `any`.
 *
 * The app also holds the wrong-shard mistakes as `@ts-expect-error` lines: the brand survives publishing, and
 * `session.client` is pg's PoolClient, not `any` (with missing types it silently became `any`).
 *
 * Installs run with --prefer-offline (npm's cache), so the test needs the network only on a cold cache.
 */
const packageDir = resolve(PUBLISHED_PACKAGE_DIR);
const work = mkdtempSync(join(tmpdir(), 'shardflake-packed-'));
after(() => rmSync(work, { recursive: true, force: true }));

function run(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', timeout: 180_000 });
  assert.equal(
    result.status,
    0,
    `${command} ${args.join(' ')} failed:\n${result.stdout}\n${result.stderr}`.slice(0, 4000),
  );
  return result.stdout;
}

const APP = `import {
  asId,
  createRouter,
  type FeedPage,
  isShardflakeError,
  type ShardflakeId,
  type ShardSession,
  sqlStateOf,
} from 'shardflake';

interface Photo {
  id: ShardflakeId;
  user_id: ShardflakeId;
  caption: string | null;
}

export async function main(url: string): Promise<void> {
  const router = await createRouter({ servers: { a: url }, catalog: 'a' });
  const user: ShardflakeId = await router.insert('users', { name: 'ann' }, { key: 'ann' });
  const photo = await router.insert('photos', { user_id: user }, { shard: router.shardOfId(user) });
  const row: Photo | null = await router.get<Photo>('photos', photo);
  const page: FeedPage<Photo> = await router.feed<Photo>('photos', {
    column: 'user_id',
    keys: [user],
    keysAreIds: true,
  });
  await router.withShard({ id: asId(String(row?.user_id ?? page.next ?? 0n)) }, async (s: ShardSession) => {
    const { rows } = await s.query<{ n: number }>('SELECT 1 AS n');
    const n: number | undefined = rows[0]?.n;
    await s.client.query('SELECT $1::int', [n]);
    // @ts-expect-error session.client is pg's PoolClient, not any
    s.client.noSuchMethod();
  });
  // @ts-expect-error an id is not a shard key
  await router.withShard({ key: user }, () => {});
  // @ts-expect-error a plain bigint is not an id
  await router.get('photos', 5n);
  // @ts-expect-error ids in a feed need keysAreIds: true
  await router.feed('photos', { column: 'user_id', keys: [user] });
  try {
    await router.close();
  } catch (error) {
    if (isShardflakeError(error, 'DATABASE_ERROR')) console.log(error.sqlState, sqlStateOf(error));
  }
}
`;

const IDS_ONLY = `import { asId, decodeId, layouts, type ShardflakeId } from 'shardflake/ids';

const id: ShardflakeId = asId('123456789');
console.log(decodeId(id, layouts.instagram).fields);
`;

const tsconfig = (file: string) =>
  JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      types: [],
    },
    files: [file],
  });

test('the packed package installs into an empty app whose strict tsc (no skipLibCheck) passes', () => {
  run('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', work], packageDir);
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack made a tarball');
  const app = join(work, 'app');
  run('mkdir', ['-p', app], work);
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify({ name: 'strict-app', version: '1.0.0', private: true, type: 'module' }),
  );
  const typescript = JSON.parse(readFileSync('node_modules/typescript/package.json', 'utf8')).version;
  run(
    'npm',
    [
      'install',
      '--prefer-offline',
      '--ignore-scripts',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      join(work, tarball),
      `typescript@${typescript}`,
    ],
    app,
  );
  writeFileSync(join(app, 'app.ts'), APP);
  writeFileSync(join(app, 'ids-only.ts'), IDS_ONLY);
  writeFileSync(join(app, 'tsconfig.json'), tsconfig('app.ts'));
  // The id tools alone: their types must not need pg's or Node's.
  writeFileSync(join(app, 'tsconfig.ids.json'), tsconfig('ids-only.ts'));
  // And it imports on the Node that runs this test (scripts/other-nodes.mjs runs it on 22 and 24 too).
  const imported = run(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      "const [a, b] = await Promise.all([import('shardflake'), import('shardflake/ids')]); console.log(typeof a.createRouter, typeof b.decodeId)",
    ],
    app,
  );
  assert.equal(imported, 'function function\n');
  const tsc = join(app, 'node_modules', '.bin', 'tsc');
  assert.equal(run(tsc, ['-p', 'tsconfig.ids.json'], app), '');
  // The router without pg's types: a loud error naming them, not a silent `any`.
  const without = spawnSync(tsc, ['-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8', timeout: 180_000 });
  assert.notEqual(without.status, 0);
  assert.match(without.stdout, /TS7016: Could not find a declaration file for module 'pg'/);
  const typesPg = JSON.parse(readFileSync('node_modules/@types/pg/package.json', 'utf8')).version;
  run(
    'npm',
    [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      '-D',
      `@types/pg@${typesPg}`,
    ],
    app,
  );
  assert.equal(run(tsc, ['-p', 'tsconfig.json'], app), '');
});

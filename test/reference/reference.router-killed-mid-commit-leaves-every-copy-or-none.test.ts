import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createRouter, type Router } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { checkReferenceTables } from '../../packages/shardflake/src/reference/verify.js';
import { useServers } from '../support/postgres.js';

// A router child writes a reference row and is killed -9 at an exact step of the commit across the two servers
// (a is the last agent: its commit is the decision; b is prepared). Recovery must leave the row on both copies or
// on neither, and verify must say, meanwhile, that a prepared write holds the tables.
const CHILD = fileURLToPath(new URL('./crash-child.js', import.meta.url));
const servers = await useServers(2);
const urls = Object.fromEntries(servers.map((s) => [s.name, s.url])) as Record<'a' | 'b', string>;
const raw = {
  servers: urls,
  catalog: 'a',
  logicalShards: 2,
  tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id())' },
  referenceTables: { plans: 'CREATE TABLE plans (name text PRIMARY KEY)' },
};
const config = validateConfig(raw, 'test-config');
const dir = await mkdtemp(join(tmpdir(), 'shardflake-ref-'));
const configFile = join(dir, 'cluster.json');
let router: Router;

async function crashAt(point: 'after-first-prepare' | 'after-decision', name: string): Promise<string> {
  const child = spawn(process.execPath, [CHILD, configFile, point, name], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => {
    err += d;
  });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /^AT .*$/m.exec(out);
      if (m) resolve(m[0]);
    });
    exited.then(() => reject(new Error(`the child exited before ${point}:\n${out}\n${err}`)));
  });
  child.kill('SIGKILL');
  await exited;
  return line;
}

async function onServer<T>(server: 'a' | 'b', sql: string): Promise<T[]> {
  const c = await connect(urls[server]);
  try {
    return (await c.query(sql)).rows as T[];
  } finally {
    await c.end();
  }
}
const copies = async (name: string) => ({
  a: (await onServer('a', `SELECT name FROM shardflake_reference.plans WHERE name = '${name}'`)).length,
  b: (await onServer('b', `SELECT name FROM shardflake_reference.plans WHERE name = '${name}'`)).length,
});
const prepared = async (server: 'a' | 'b') =>
  (await onServer(server, 'SELECT gid FROM pg_prepared_xacts')).length;

before(async () => {
  await writeFile(configFile, JSON.stringify(raw));
  await initCluster(config);
  router = await createRouter(config, { transactions: { recovery: false, inDoubtAfterMs: 500 } });
});
after(async () => {
  await router?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('a reference write whose router dies mid-commit', () => {
  it('killed after the first PREPARE (no decision): recovery rolls it back, neither copy has the row', async () => {
    const line = await crashAt('after-first-prepare', 'p1');
    assert.match(line, / b$/);
    assert.equal(await prepared('b'), 1);
    const problems = await checkReferenceTables(config);
    assert.equal(problems.length, 1);
    assert.match(
      problems[0]?.message ?? '',
      /prepared transaction .* holds the reference tables on server b/,
    );
    await new Promise((r) => setTimeout(r, 600));
    const report = await router.recoverTransactions();
    assert.equal(report.rolledBack.length, 1);
    assert.deepEqual(await copies('p1'), { a: 0, b: 0 });
    assert.equal(await prepared('b'), 0);
    assert.deepEqual(await checkReferenceTables(config), []);
  });

  it('killed after the decision: the first server has the row, recovery gives it to the other copy', async () => {
    await crashAt('after-decision', 'p2');
    // Atomic, not isolated: the last agent's copy shows the row before the prepared one is committed.
    assert.deepEqual(await copies('p2'), { a: 1, b: 0 });
    const report = await router.recoverTransactions();
    assert.equal(report.committed.length, 1);
    assert.deepEqual(await copies('p2'), { a: 1, b: 1 });
    assert.deepEqual(await checkReferenceTables(config), []);
    // The next write of the same key is refused on every copy alike (the copies agree).
    await assert.rejects(
      router.withReference((s) => s.query("INSERT INTO plans (name) VALUES ('p2')")),
      /server a: .*duplicate key/,
    );
  });
});

import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type pg from 'pg';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';

// 8 shards: 0-3 on server a, 4-7 on server b.
const servers = await useServers(2);
const b = servers[1]?.url ?? '';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, probe: () => Promise<T | null>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Every shard's photos_likes index (valid or not) and applied version, across both servers. */
async function shardsState(): Promise<{ schema: string; index: boolean | null; version: number }[]> {
  const all = [];
  for (const s of servers) {
    const client = await connect(s.url);
    const { rows: schemas } = await client.query(
      "SELECT nspname AS schema FROM pg_namespace WHERE nspname LIKE 'shard\\_%' ORDER BY 1",
    );
    for (const { schema } of schemas as { schema: string }[]) {
      const { rows } = await client.query(
        `SELECT (SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                 WHERE c.relnamespace = $1::regnamespace AND c.relname = 'photos_likes') AS index,
                (SELECT max(version) FROM "${schema}"._shardflake_migrations) AS version`,
        [schema],
      );
      all.push({ schema, ...(rows[0] as { index: boolean | null; version: number }) });
    }
    await client.end();
  }
  return all;
}

test('cluster migrate killed (SIGKILL) in the middle of a CREATE INDEX CONCURRENTLY: the server cancels the build, the invalid index it left is rebuilt by the next run, every shard ends valid and recorded', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-cic-kill-'));
  const path = join(dir, 'cluster.json');
  const base = {
    servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
    catalog: 'a',
    logicalShards: 8,
    epoch: '2024-01-01T00:00:00Z',
    tables: {
      photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL)',
    },
    migrations: [
      { version: 1, name: 'likes', sql: 'ALTER TABLE photos ADD COLUMN likes integer NOT NULL DEFAULT 0' },
    ],
  };
  await writeFile(path, JSON.stringify(base));
  assert.equal((await startCli(['cluster', 'init', '--config', path]).done).code, 0);
  await writeFile(
    path,
    JSON.stringify({
      ...base,
      migrations: [
        ...base.migrations,
        { version: 2, name: 'likes index', sql: 'CREATE INDEX CONCURRENTLY photos_likes ON photos (likes)' },
        { version: 3, name: 'tags', sql: 'ALTER TABLE photos ADD COLUMN tags text' },
      ],
    }),
  );

  // A writer on shard 5 holds its table: the build there gets as far as creating its (invalid) index and then
  // waits for the writer ("waiting for writers before build"). That is the moment the CLI is killed.
  const writer = await connect(b);
  await writer.query('BEGIN; INSERT INTO shard_0005.photos (user_id) VALUES (1)');
  const watcher: pg.Client = await connect(b);
  const run = startCli(['cluster', 'migrate', '--config', path, '--json']);
  const buildPid = await until('the build on shard 5 to wait for the writer', async () => {
    const { rows } = await watcher.query(
      `SELECT pid FROM pg_stat_progress_create_index
       WHERE relid = 'shard_0005.photos'::regclass AND phase = 'waiting for writers before build'`,
    );
    return (rows[0] as { pid: number } | undefined)?.pid ?? null;
  });
  run.child.kill('SIGKILL');
  const killed = await run.done;
  assert.equal(killed.signal, 'SIGKILL');

  // Nobody is left to wait for the build; client_connection_check_interval makes the server cancel it.
  await until('the orphaned build to be cancelled', async () => {
    const { rows } = await watcher.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [buildPid]);
    return rows.length === 0 ? true : null;
  });
  await writer.query('ROLLBACK');
  await writer.end();
  await watcher.end();

  const before = await shardsState();
  const shard5 = before.find((s) => s.schema === 'shard_0005');
  assert.deepEqual(
    shard5,
    { schema: 'shard_0005', index: false, version: 1 },
    'an invalid index was left behind',
  );
  assert.ok(
    before.some((s) => s.version < 3),
    'the killed run had work left (the rerun is not a no-op)',
  );

  const rerun = await startCli(['cluster', 'migrate', '--config', path, '--json']).done;
  assert.equal(rerun.code, 0, rerun.stderr);
  const result = JSON.parse(rerun.stdout);
  assert.deepEqual(result.failed, []);
  assert.deepEqual(
    result.rebuiltIndexes.map((r: { shard: number; index: string }) => [r.shard, r.index]),
    [[5, 'photos_likes']],
  );
  const after = await shardsState();
  assert.equal(after.length, 8);
  for (const s of after) assert.deepEqual(s, { schema: s.schema, index: true, version: 3 });

  const status = await startCli(['cluster', 'status', '--config', path, '--json']).done;
  assert.deepEqual(JSON.parse(status.stdout).schemaVersions, { 3: 8 });
});

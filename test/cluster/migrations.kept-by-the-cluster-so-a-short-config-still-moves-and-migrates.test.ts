import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { clusterStatus, isShardflakeError, migrateCluster, moveShard } from 'shardflake';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrationsCheck } from '../../packages/shardflake/src/admin/migrations-verify.js';
import { readHistory } from '../../packages/shardflake/src/catalog/migrations.js';
import { shardSchema, validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';

/**
 * Migrations kept by the cluster (issue 22 item 5): the catalog records every version's name, checksum and SQL, so
 * a config that lacks old migrations still migrates and moves from the catalog's SQL and is reported — never
 * "already current" against a target of 0 — while a config that changes or reorders recorded migrations is refused
 * with what differs, by migrate, and reported by status and the verify check.
 */
const servers = await useServers(2);
const url = (name: string) => servers.find((s) => s.name === name)?.url as string;
const MIGRATIONS = [
  { version: 1, name: 'likes', sql: 'ALTER TABLE photos ADD COLUMN likes integer NOT NULL DEFAULT 0' },
  {
    version: 2,
    name: 'tags',
    sql: ['ALTER TABLE photos ADD COLUMN tags text[]', 'CREATE INDEX photos_tags ON photos (tags)'],
  },
];
const configWith = (migrations: unknown[], extra: Record<string, unknown> = {}) =>
  validateConfig(
    {
      servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
      catalog: 'a',
      logicalShards: 4,
      epoch: '2024-01-01T00:00:00Z',
      tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), caption text)' },
      migrations,
      ...extra,
    },
    'cluster.json',
  );
const full = configWith(MIGRATIONS);
const short = configWith([]);
const dir = await mkdtemp(join(tmpdir(), 'shardflake-kept-migrations-'));
after(() => rm(dir, { recursive: true, force: true }));

async function catalogRows(): Promise<{ version: number; name: string; checksum: string; sql: string }[]> {
  const c = await connect(url('a'));
  try {
    return (await c.query('SELECT version, name, checksum, sql FROM shardflake.migrations ORDER BY version'))
      .rows;
  } finally {
    await c.end();
  }
}

async function columnsOf(server: string, shard: number): Promise<string[]> {
  const c = await connect(url(server));
  try {
    const { rows } = await c.query(
      `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'photos' ORDER BY ordinal_position`,
      [shardSchema(full, shard)],
    );
    return rows.map((r: { column_name: string }) => r.column_name);
  } finally {
    await c.end();
  }
}

before(async () => {
  await initCluster(full);
});

describe('the catalog keeps the cluster migration history', () => {
  it('init records version 0 and every migration with name, SHA-256 checksum and SQL', async () => {
    const rows = await catalogRows();
    assert.deepEqual(
      rows.map((r) => [r.version, r.name]),
      [
        [0, 'tables'],
        [1, 'likes'],
        [2, 'tags'],
      ],
    );
    for (const r of rows) assert.match(r.checksum, /^[0-9a-f]{64}$/);
    assert.equal(
      rows[2]?.sql,
      'ALTER TABLE photos ADD COLUMN tags text[];\nCREATE INDEX photos_tags ON photos (tags);',
    );
  });

  it('a config without the old migrations: status and migrate say what differs, the target stays 2', async () => {
    const status = await clusterStatus(short);
    assert.equal(status.targetSchemaVersion, 2);
    assert.deepEqual(status.migrationDifferences, [
      'migration 1 (likes) is recorded by the cluster but not in the config',
      'migration 2 (tags) is recorded by the cluster but not in the config',
    ]);
    assert.ok(status.warnings.some((w) => w.includes('migration 1 (likes) is recorded by the cluster')));
    assert.ok(!status.warnings.some((w) => /behind/.test(w)), status.warnings.join('\n'));
    const result = await migrateCluster(short);
    assert.equal(result.target, 2);
    assert.equal(result.alreadyCurrent, 4);
    assert.equal(result.differences.length, 2);
    const catalog = await connect(url('a'));
    const pools = { use: <T>(_server: string, fn: (c: typeof catalog) => Promise<T>) => fn(catalog) };
    const problems = await migrationsCheck.run(short, pools).finally(() => catalog.end());
    assert.deepEqual(
      problems.map((p) => [p.check, p.where]),
      [
        ['migrations', 'migration 1'],
        ['migrations', 'migration 2'],
      ],
    );
    assert.match(problems[0]?.what ?? '', /^config and cluster migrations differ: migration 1 \(likes\)/);
  });

  it('the CLI prints the differences as warnings (status and migrate), never a bare "already current"', async () => {
    const path = join(dir, 'short.json');
    await writeFile(
      path,
      JSON.stringify({
        servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
        catalog: 'a',
        logicalShards: 4,
        epoch: '2024-01-01T00:00:00Z',
        tables: { photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), caption text)' },
      }),
    );
    const migrate = await startCli(['cluster', 'migrate', '--config', path]).done;
    assert.equal(migrate.code, 0, migrate.stderr);
    assert.match(migrate.stdout, /cluster migrate: target v2; migrated 0, already current 4/);
    assert.match(
      migrate.stdout,
      /warning: config and cluster migrations differ: migration 2 \(tags\) is recorded/,
    );
    const status = await startCli(['cluster', 'status', '--config', path]).done;
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /target v2/);
    assert.match(status.stdout, /warning: config and cluster migrations differ: migration 1 \(likes\)/);
  });

  it('a config that changes or reorders a recorded migration is refused by migrate, with what differs', async () => {
    const before = await catalogRows();
    const changed = configWith([
      MIGRATIONS[0],
      { ...MIGRATIONS[1], sql: 'ALTER TABLE photos ADD COLUMN tags text' },
    ]);
    await assert.rejects(migrateCluster(changed), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'INVALID_CONFIG'));
      assert.match(
        e.message,
        /^cluster\.json: its history disagrees with the one the cluster keeps \(catalog server a\): migration 2 \(tags\): the config's SQL differs from what the cluster recorded \(checksum [0-9a-f]{12} vs [0-9a-f]{12}\); nothing was changed$/,
      );
      return true;
    });
    const reordered = configWith([
      { ...MIGRATIONS[1], version: 1 },
      { ...MIGRATIONS[0], version: 2 },
    ]);
    await assert.rejects(migrateCluster(reordered), (e: unknown) => {
      assert.ok(isShardflakeError(e, 'INVALID_CONFIG'));
      assert.match(
        e.message,
        /the config's migration 1 \(tags\) is the cluster's migration 2: the config lists migrations in another order/,
      );
      return true;
    });
    const status = await clusterStatus(changed);
    assert.ok(status.warnings.some((w) => /migration 2 \(tags\): the config's SQL differs/.test(w)));
    assert.deepEqual(await catalogRows(), before, 'nothing was recorded');
  });

  it('a move with the short config makes the target from the recorded SQL; a new migration is recorded and applied', async () => {
    const result = await moveShard(short, 0, 'b');
    assert.equal(result.shard, 0);
    assert.deepEqual(await columnsOf('b', 0), ['id', 'caption', 'likes', 'tags']);
    const next = configWith([
      ...MIGRATIONS,
      { version: 3, name: 'place', sql: 'ALTER TABLE photos ADD COLUMN place text' },
    ]);
    const migrated = await migrateCluster(next);
    assert.equal(migrated.target, 3);
    assert.equal(migrated.migrated, 4);
    assert.deepEqual(migrated.differences, []);
    assert.deepEqual(
      (await catalogRows()).map((r) => r.version),
      [0, 1, 2, 3],
    );
    assert.deepEqual(await columnsOf('b', 0), ['id', 'caption', 'likes', 'tags', 'place']);
    // A shorter config (even one with no migrations) now sees 3 as the target, and migrate changes nothing.
    const again = await migrateCluster(short);
    assert.equal(again.target, 3);
    assert.equal(again.alreadyCurrent, 4);
  });

  it('a cluster from before histories were kept: shards ahead of the config are reported, not "already current"', async () => {
    const c = await connect(url('a'));
    try {
      await c.query('DROP TABLE shardflake.migrations');
    } finally {
      await c.end();
    }
    const status = await clusterStatus(short);
    assert.ok(
      status.warnings.some((w) =>
        /4 shards are at a schema version above 0: the config lacks migrations/.test(w),
      ),
      status.warnings.join('\n'),
    );
    const result = await migrateCluster(short);
    assert.equal(result.alreadyCurrent, 0);
    assert.match(
      result.differences.join('\n'),
      /4 shards are at schema version 3, above the config's 0: the config lacks migrations 1–3/,
    );
    // That run recorded what the config had (the tables), from which the history grows again.
    const history = await connect(url('a'));
    assert.deepEqual(
      (await readHistory(history).finally(() => history.end())).map((r) => r.version),
      [0],
    );
  });
});

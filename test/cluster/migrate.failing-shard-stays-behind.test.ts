import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { migrateCluster } from '../../packages/shardflake/src/admin/migrate.js';
import { clusterStatus } from '../../packages/shardflake/src/admin/status.js';
import { readShardMap } from '../../packages/shardflake/src/catalog/shards.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

const servers = await useServers(2);
const urlOf = (name: string) => defined(servers.find((s) => s.name === name)).url;

const migrations = [
  { version: 1, name: 'likes count', sql: 'ALTER TABLE photos ADD COLUMN likes integer NOT NULL DEFAULT 0' },
  {
    version: 2,
    name: 'short captions',
    sql: [
      'ALTER TABLE photos ADD CONSTRAINT caption_short CHECK (length(caption) <= 10)',
      'CREATE INDEX photos_likes ON photos (likes)',
    ],
  },
];

async function columnsOf(server: string, schema: string): Promise<string[]> {
  const client = await connect(urlOf(server));
  const { rows } = await client.query(
    "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'photos' ORDER BY ordinal_position",
    [schema],
  );
  const indexes = await client.query(
    'SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 ORDER BY 1',
    [schema, 'photos'],
  );
  await client.end();
  return [
    ...rows.map((r: { column_name: string }) => r.column_name),
    ...indexes.rows.map((r: { indexname: string }) => r.indexname),
  ];
}

describe('cluster migrate', () => {
  it('applies every migration on every shard, one transaction per shard; a failing shard stays at its old version', async () => {
    const base = testConfig(servers, { logicalShards: 16 });
    await initCluster(base);
    const catalog = await connect(urlOf('a'));
    const map = await readShardMap(catalog);
    await catalog.end();
    // Shard 9 holds a row that migration 2's constraint refuses.
    const bad = defined(map.shards[9]);
    const client = await connect(urlOf(bad.server));
    await client.query(
      `INSERT INTO "${bad.schema}".photos (user_id, caption) VALUES (9, 'a caption far too long')`,
    );
    await client.end();

    const config = testConfig(servers, { logicalShards: 16, migrations });
    const progress: number[] = [];
    const result = await migrateCluster(config, { onProgress: (done) => progress.push(done) });
    assert.equal(result.target, 2);
    assert.equal(result.migrated, 15);
    assert.deepEqual(
      result.failed.map((f) => [f.shard, f.version, f.sqlState]),
      [[9, 0, '23514']],
    );
    assert.match(defined(result.failed[0]).error, /caption_short/);
    assert.equal(progress.at(-1), 16);

    // Shard 9 was rolled back whole: not even migration 1's column, which succeeded before 2 failed.
    assert.deepEqual(await columnsOf(bad.server, bad.schema), [
      'id',
      'user_id',
      'caption',
      'photos_pkey',
      'photos_user',
    ]);
    const good = defined(map.shards[3]);
    assert.deepEqual(await columnsOf(good.server, good.schema), [
      'id',
      'user_id',
      'caption',
      'likes',
      'photos_likes',
      'photos_pkey',
      'photos_user',
    ]);

    const status = await clusterStatus(config);
    assert.deepEqual(status.schemaVersions, { 0: 1, 2: 15 });
    assert.match(defined(status.shards[9]).lastError ?? '', /caption_short/);
    assert.ok(status.warnings.some((w) => /1 shards are behind/.test(w)));

    // Fix the data, run again: only shard 9 has work left.
    const fix = await connect(urlOf(bad.server));
    await fix.query(`UPDATE "${bad.schema}".photos SET caption = 'short'`);
    await fix.end();
    const again = await migrateCluster(config);
    assert.equal(again.migrated, 1);
    assert.equal(again.alreadyCurrent, 15);
    assert.deepEqual(again.failed, []);
    assert.deepEqual((await clusterStatus(config)).schemaVersions, { 2: 16 });
  });

  it('creates new clusters directly at the latest version', async () => {
    const config = testConfig(servers, { logicalShards: 4, schemaPrefix: 'fresh_', migrations });
    // A second cluster cannot share the first one's catalog; give it its own catalog server order.
    const other = { ...config, catalog: 'b' };
    const result = await initCluster(other);
    assert.equal(result.created, 4);
    const status = await clusterStatus(other);
    assert.deepEqual(status.schemaVersions, { 2: 4 });
    const s = defined(status.shards[0]);
    assert.ok((await columnsOf(s.server, s.schema)).includes('likes'));
  });

  it('refuses shards that are moving and says so', async () => {
    const config = testConfig(servers, {
      logicalShards: 16,
      migrations: [
        ...migrations,
        { version: 3, name: 'tags', sql: 'ALTER TABLE photos ADD COLUMN tags text' },
      ],
    });
    const catalog = await connect(urlOf('a'));
    await catalog.query("UPDATE shardflake.shards SET state = 'moving' WHERE shard = 5");
    const result = await migrateCluster(config);
    await catalog.query("UPDATE shardflake.shards SET state = 'active' WHERE shard = 5");
    await catalog.end();
    assert.equal(result.migrated, 15);
    assert.deepEqual(
      result.failed.map((f) => [f.shard, f.version]),
      [[5, 2]],
    );
    assert.match(defined(result.failed[0]).error, /being moved/);
  });
});

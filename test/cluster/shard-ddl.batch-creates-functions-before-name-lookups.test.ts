import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readInstalledGenerator } from 'shardflake';
import { shardsCreationSql } from '../../packages/shardflake/src/admin/shard-ddl.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';
import { testConfig } from './cluster-config.js';

test('a batch of shards creates every function before any statement that looks one up by name, and each shard comes out whole', async () => {
  const servers = await useServers(1);
  const config = testConfig(servers, { logicalShards: 16 });
  const shards = [3, 4, 5].map((shard) => ({ shard, schema: `batch_${shard}` }));
  const sql = shardsCreationSql(config, shards);

  // A CREATE FUNCTION throws away PostgreSQL's by-name function lists; COMMENT ON FUNCTION and DEFAULT next_id()
  // read them. All creations first means one read per batch, not one per shard.
  const lastCreate = sql.lastIndexOf('CREATE OR REPLACE FUNCTION');
  const firstLookup = Math.min(sql.indexOf('COMMENT ON FUNCTION'), sql.indexOf('DEFAULT next_id()'));
  assert.ok(firstLookup > lastCreate, 'no function is looked up by name before the last one is created');
  assert.equal(sql.match(/COMMENT ON FUNCTION "batch_\d"\."next_id"\(\)/g)?.length, 3);

  const client = await connect(defined(servers[0]).url);
  try {
    await client.query(`BEGIN;\n${sql}COMMIT;`);
    for (const { shard, schema } of shards) {
      assert.equal((await readInstalledGenerator(client, schema))?.shard, shard);
      const { rows } = await client.query(
        `INSERT INTO "${schema}".photos (user_id, caption) VALUES (1, 'x') RETURNING "${schema}".id_to_shard(id) AS s`,
      );
      assert.equal(rows[0].s, shard, `${schema}.photos takes its ids from its own next_id()`);
      const versions = await client.query(`SELECT version FROM "${schema}"._shardflake_migrations`);
      assert.deepEqual(
        versions.rows.map((r) => r.version),
        [0],
      );
    }
  } finally {
    await client.end();
  }
});

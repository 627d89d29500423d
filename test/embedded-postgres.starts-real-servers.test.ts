import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connect } from 'shardflake';
import { useServers } from './support/postgres.js';

test('two embedded servers start on distinct loopback ports and answer queries with int8 as bigint', async () => {
  const servers = await useServers(2);
  assert.equal(servers.length, 2);
  assert.notEqual(servers[0]?.port, servers[1]?.port);
  for (const server of servers) {
    const client = await connect(server.url);
    try {
      const { rows } = await client.query(
        'SELECT 9007199254740993::bigint AS big, current_setting($1) AS wal',
        ['wal_level'],
      );
      assert.equal(rows[0].big, 9007199254740993n);
      assert.equal(rows[0].wal, 'logical');
    } finally {
      await client.end();
    }
  }
});

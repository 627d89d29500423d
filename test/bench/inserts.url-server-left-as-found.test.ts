import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runInsertBench } from '../../packages/cli/src/bench/inserts.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';

const [server] = await useServers(1);

test('on a server given by URL the benchmark leaves no table, schema or extension behind', async () => {
  const url = (server as { url: string }).url;
  const result = await runInsertBench({ url, rows: 30, batch: 10, types: ['instagram', 'lsid-bytea'] });
  assert.deepEqual(result.engines[0]?.types.map((t) => t.type).sort(), ['instagram', 'lsid-bytea']);
  assert.ok(
    result.engines[0]?.types.every((t) => t.leafDensity !== undefined),
    'pgstattuple was usable',
  );
  const client = await connect(url);
  try {
    const left = await client.query(
      `SELECT relname AS name FROM pg_class WHERE relname LIKE 'bench\\_%'
       UNION ALL SELECT nspname FROM pg_namespace WHERE nspname = 'bench_ids'
       UNION ALL SELECT extname FROM pg_extension WHERE extname = 'pgstattuple'`,
    );
    assert.deepEqual(left.rows, []);
  } finally {
    await client.end();
  }
  // A second run on the same server works (nothing left to trip over).
  const again = await runInsertBench({ url, rows: 10, batch: 10, types: ['instagram'] });
  assert.equal(again.engines[0]?.types[0]?.rows, 10);
});

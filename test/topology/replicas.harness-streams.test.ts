import assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import { useServers } from '../support/postgres.js';
import { caughtUp, startReplica } from '../support/replicas.js';

test('a replica made by the harness streams the primary and refuses writes', async () => {
  const [primary] = await useServers(1);
  assert.ok(primary);
  const replica = await startReplica(primary);
  const p = new pg.Client(primary.url);
  await p.connect();
  await p.query('CREATE TABLE t (x int)');
  await p.query('INSERT INTO t VALUES (1), (2)');
  await p.end();
  await caughtUp(primary, replica);
  const r = new pg.Client(replica.url);
  await r.connect();
  assert.equal((await r.query('SELECT count(*)::int AS n FROM t')).rows[0].n, 2);
  await assert.rejects(r.query('INSERT INTO t VALUES (3)'), /read-only transaction/);
  await r.end();
});

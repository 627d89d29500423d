import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSqlAcrossBench } from '../../packages/cli/src/bench/sql-across.js';

// A tiny run of `bench sql-across`: each server is sent exactly one statement per router.sql call (counted from the
// servers' own statement logs), whatever the number of shards, and the run checked the answer against one table,
// unprepared and with `{ prepare: true }` (it throws otherwise).
test('bench sql-across: one statement per server per query, and the same answer as one table', async () => {
  const r = await runSqlAcrossBench({ rows: 3000, shards: 32, repeat: 2 });
  assert.deepEqual(r.roundTripsPerQuery, { a: 1, b: 1 });
  assert.equal(r.groups, 20);
  assert.ok(r.ratio > 0 && r.router.p50Ms > 0 && r.oneTable.p50Ms > 0);
  assert.ok(r.prepared.ratio > 0 && r.cold.routerMs > 0 && r.cold.oneTableMs > 0);
});

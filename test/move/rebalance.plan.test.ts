import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { isShardflakeError } from '../../packages/shardflake/src/errors/errors.js';
import { planRebalance, planRebalanceByRows } from '../../packages/shardflake/src/move/rebalance.js';

test('adding a third server to two with 8 shards each moves the fewest shards to even the counts', () => {
  const shards = Array.from({ length: 16 }, (_, shard) => ({ shard, server: shard < 8 ? 'a' : 'b' }));
  const plan = planRebalance(shards, ['a', 'b', 'c']);
  assert.deepEqual(plan.before, { a: 8, b: 8, c: 0 });
  assert.deepEqual(Object.values(plan.after).sort(), [5, 5, 6]);
  assert.equal(plan.moves.length, 5);
  assert.ok(plan.moves.every((m) => m.to === 'c'));
});

test('a balanced cluster plans no moves; a shard on a server the config lacks is refused', () => {
  const shards = Array.from({ length: 6 }, (_, shard) => ({
    shard,
    server: ['a', 'b', 'c'][shard % 3] as string,
  }));
  assert.deepEqual(planRebalance(shards, ['a', 'b', 'c']).moves, []);
  assert.throws(
    () => planRebalance(shards, ['a', 'b']),
    (e) => isShardflakeError(e, 'UNKNOWN_SERVER'),
  );
});

test('property: every plan leaves the servers within one shard of each other, moves each shard at most once, and moves no more shards than needed', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 6 }),
      fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 300 }),
      (serverCount, homes) => {
        const servers = Array.from({ length: serverCount }, (_, i) => `s${i}`);
        const shards = homes.map((h, shard) => ({ shard, server: servers[h % serverCount] as string }));
        const plan = planRebalance(shards, servers);
        const counts = Object.values(plan.after);
        assert.ok(Math.max(...counts) - Math.min(...counts) <= 1);
        assert.equal(new Set(plan.moves.map((m) => m.shard)).size, plan.moves.length);
        for (const m of plan.moves) assert.equal(shards[m.shard]?.server, m.from);
        // Lower bound: every shard above the larger quota must leave its server.
        const ceil = Math.ceil(shards.length / serverCount);
        const mustLeave = Object.values(plan.before).reduce((n, c) => n + Math.max(0, c - ceil), 0);
        assert.ok(plan.moves.length >= mustLeave);
        const floorQuota = Math.floor(shards.length / serverCount);
        const surplus = Object.values(plan.before).reduce((n, c) => n + Math.max(0, c - floorQuota), 0);
        assert.ok(plan.moves.length <= surplus);
      },
    ),
  );
});

test('by rows: one big shard and many small ones end up spread so that no single move could narrow the gap further', () => {
  const shards = [
    { shard: 0, server: 'a', rows: 900 },
    ...Array.from({ length: 9 }, (_, i) => ({ shard: i + 1, server: 'a', rows: 100 })),
    { shard: 10, server: 'b', rows: 50 },
  ];
  const plan = planRebalanceByRows(shards, ['a', 'b', 'c']);
  assert.deepEqual(plan.rowsBefore, { a: 1800, b: 50, c: 0 });
  const loads = Object.values(plan.rowsAfter);
  assert.ok(Math.max(...loads) - Math.min(...loads) < 1800);
  assert.equal(
    plan.moves.some((m) => m.shard === 0),
    true,
    'the big shard moves off the crowded server',
  );
});

test('property (by rows): the spread between the most and least loaded server never grows, and each shard moves at most once', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 5 }),
      fc.array(
        fc.record({ home: fc.integer({ min: 0, max: 4 }), rows: fc.integer({ min: 0, max: 10_000 }) }),
        {
          minLength: 1,
          maxLength: 100,
        },
      ),
      (serverCount, list) => {
        const servers = Array.from({ length: serverCount }, (_, i) => `s${i}`);
        const shards = list.map((s, shard) => ({
          shard,
          server: servers[s.home % serverCount] as string,
          rows: s.rows,
        }));
        const plan = planRebalanceByRows(shards, servers);
        const spread = (r: Record<string, number>) =>
          Math.max(...Object.values(r)) - Math.min(...Object.values(r));
        assert.ok(spread(plan.rowsAfter) <= spread(plan.rowsBefore));
        assert.equal(new Set(plan.moves.map((m) => m.shard)).size, plan.moves.length);
        assert.equal(
          Object.values(plan.rowsAfter).reduce((a, b) => a + b, 0),
          shards.reduce((a, s) => a + s.rows, 0),
        );
      },
    ),
  );
});

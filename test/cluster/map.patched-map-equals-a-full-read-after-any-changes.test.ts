import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import type pg from 'pg';
import {
  announceShards,
  bumpMapVersion,
  installCatalog,
  readShardMap,
  recordShards,
  SHARD_STATES,
  setShardsState,
  writeClusterRow,
} from '../../packages/shardflake/src/catalog/shards.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { createShardMap } from '../../packages/shardflake/src/routing/map.js';
import { defined } from '../support/defined.js';
import { useServers } from '../support/postgres.js';

/**
 * Issue 33, item 4: a router's refresh reads only the shard rows changed since its map version and patches its map.
 * For any sequence of catalog writes — shards placed and re-placed (what a move's steps write), shards recorded by
 * init and announced, versions that change no shard (a new reference copy) — with refreshes at any points between
 * them, the patched map equals a full re-read, and each patch read exactly the shards changed since the last one.
 * Runs the router's map module against a real catalog (no shard schemas: the map never reads them).
 */
const [server] = await useServers(1);
const SHARDS = 64;
let catalog: pg.Client;
let recorded = 0;

before(async () => {
  catalog = await connect(defined(server).url);
  await installCatalog(catalog);
  await writeClusterRow(catalog, {
    logicalShards: SHARDS,
    epochMs: 1_700_000_000_000,
    layout: 'instagram',
    schemaPrefix: 'shard_',
  });
  await record(8);
});
after(async () => {
  await catalog.end();
});

async function record(count: number): Promise<number[]> {
  const shards = Array.from({ length: Math.min(count, SHARDS - recorded) }, (_, i) => recorded + i);
  recorded += shards.length;
  await recordShards(
    catalog,
    shards.map((shard) => ({ shard, server: 'a', schema: `shard_${shard}`, schemaVersion: 0 })),
  );
  await announceShards(catalog);
  return shards;
}

const op = fc.oneof(
  fc.record({
    kind: fc.constant('place' as const),
    picks: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }),
    state: fc.constantFrom(...SHARD_STATES),
    server: fc.option(fc.constantFrom('a', 'b', 'c'), { nil: undefined }),
  }),
  fc.record({ kind: fc.constant('record' as const), count: fc.integer({ min: 1, max: 5 }) }),
  fc.record({ kind: fc.constant('empty-version' as const) }),
  fc.record({ kind: fc.constant('refresh' as const) }),
);

test('for any sequence of map changes and refreshes, the patched map equals a full re-read and reads only the changed rows', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(op, { maxLength: 12 }), async (ops) => {
      const map = createShardMap(defined(server).url, {
        listen: false,
        reconnectMs: 1000,
        catalogServer: 'a',
        emit: undefined,
        onMapChange: undefined,
      });
      try {
        await map.fresh();
        assert.equal(map.lastRead?.kind, 'full');
        let changed = new Set<number>();
        let emptyVersion = false;
        const check = async () => {
          map.markStale();
          const state = await map.fresh();
          const full = await readShardMap(catalog);
          assert.equal(state.version, full.version);
          assert.deepEqual(state.shards.filter(Boolean), full.shards);
          // A version without a changed shard is read whole; otherwise only the rows changed since the last read.
          if (emptyVersion && changed.size === 0) assert.equal(map.lastRead?.kind, 'full');
          else
            assert.deepEqual(map.lastRead && { kind: map.lastRead.kind, rows: map.lastRead.shardRows }, {
              kind: 'changes',
              rows: changed.size,
            });
          changed = new Set();
          emptyVersion = false;
        };
        for (const o of ops) {
          if (o.kind === 'place') {
            const shards = [...new Set(o.picks.map((p) => p % recorded))];
            await catalog.query('BEGIN');
            await setShardsState(catalog, shards, o.state, o.server);
            await catalog.query('COMMIT');
            for (const s of shards) changed.add(s);
          } else if (o.kind === 'record') {
            for (const s of await record(o.count)) changed.add(s);
          } else if (o.kind === 'empty-version') {
            await catalog.query('BEGIN');
            await bumpMapVersion(catalog);
            await catalog.query('COMMIT');
            emptyVersion = true;
          } else await check();
        }
        await check();
      } finally {
        await map.close();
      }
    }),
    { numRuns: 40 },
  );
});

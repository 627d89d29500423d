#!/usr/bin/env node
// What one map version costs the catalog per router (issue 33, item 4), before and after refreshes read only the
// changed shards: starts one embedded server, inits a cluster of --shards logical shards (one small table), makes
// a map version that changes one shard (what each step of a move does), then reads that version as a router did
// before (the whole map: cluster row, every shard row, servers, reference copies, adoption) and as it does now
// (the changed shard rows above its version, then servers, reference copies, adoption), alternating, --rounds times
// each. Prints per refresh: shard rows read, bytes the router received (counted on its socket), statements, and
// the median and p90 time on the router's side (localhost, so mostly the catalog's work and the router's parsing).
// Then starts --routers routers, uses them (insert, get, a map change) and counts the catalog server's backends by
// application_name.
//
//   npm run build && node scripts/map-refresh-cost.mjs [--shards 4096] [--rounds 200] [--routers 10] [--json]
import { startEmbeddedServers } from '../packages/embedded/dist/index.js';
import { initCluster } from '../packages/shardflake/dist/admin/init.js';
import { readAdoptionRouting } from '../packages/shardflake/dist/catalog/adopt.js';
import { readReferenceCopies } from '../packages/shardflake/dist/catalog/reference-copies.js';
import { readServers } from '../packages/shardflake/dist/catalog/servers.js';
import {
  bumpMapVersion,
  readClusterInfo,
  readShardChanges,
  readShardMap,
  setShardsState,
} from '../packages/shardflake/dist/catalog/shards.js';
import { validateConfig } from '../packages/shardflake/dist/config/config.js';
import { connect } from '../packages/shardflake/dist/postgres/connect.js';
import { createRouter } from '../packages/shardflake/dist/router/router.js';

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const shards = flag('--shards', 4096);
const rounds = flag('--rounds', 200);
const routerCount = flag('--routers', 10);
const json = args.includes('--json');

const [server] = await startEmbeddedServers(1);
try {
  const config = validateConfig(
    {
      servers: { a: server.url },
      catalog: 'a',
      logicalShards: shards,
      epoch: '2024-01-01T00:00:00Z',
      tables: { items: ['CREATE TABLE items (id bigint PRIMARY KEY DEFAULT next_id(), note text)'] },
    },
    'map-refresh-cost',
  );
  const initStart = performance.now();
  await initCluster(config, { batchSize: 256 });
  const initSeconds = (performance.now() - initStart) / 1000;

  const client = await connect(server.url, { applicationName: 'map-refresh-cost' });
  let bytes = 0;
  client.connection.stream.on('data', (chunk) => {
    bytes += chunk.length;
  });
  let statements = 0;
  const counted = {
    query: (...a) => {
      statements++;
      return client.query(...a);
    },
  };

  // One map version that changes one shard's row, as each step of a move does.
  await client.query('BEGIN');
  await setShardsState(client, [shards >> 1], 'active');
  await client.query('COMMIT');
  const version = (await readClusterInfo(client)).mapVersion;
  const since = version - 1n;

  const before = async () => {
    await readClusterInfo(counted);
    const map = await readShardMap(counted);
    await readServers(counted);
    await readReferenceCopies(counted);
    await readAdoptionRouting(counted);
    return map.shards.length;
  };
  const after = async () => {
    const changes = await readShardChanges(counted, since);
    await readServers(counted);
    await readReferenceCopies(counted);
    await readAdoptionRouting(counted);
    return changes.shards.length;
  };

  const measure = async (read) => {
    const b0 = bytes;
    const s0 = statements;
    const t0 = performance.now();
    const rows = await read();
    return { ms: performance.now() - t0, bytes: bytes - b0, statements: statements - s0, rows };
  };
  const runs = { before: [], after: [] };
  // Warm both (plans, caches), then alternate so load changes hit both alike.
  for (let i = 0; i < 5; i++) {
    await before();
    await after();
  }
  for (let i = 0; i < rounds; i++) {
    runs.before.push(await measure(before));
    runs.after.push(await measure(after));
  }
  const summary = (list) => {
    const ms = list.map((r) => r.ms).sort((x, y) => x - y);
    return {
      shardRows: list[0].rows,
      bytes: list[0].bytes,
      statements: list[0].statements,
      medianMs: Number(ms[Math.floor(ms.length / 2)].toFixed(3)),
      p90Ms: Number(ms[Math.floor(ms.length * 0.9)].toFixed(3)),
    };
  };
  const result = { shards, rounds, initSeconds: Number(initSeconds.toFixed(1)) };
  result.before = summary(runs.before);
  result.after = summary(runs.after);
  result.timeRatio = Number((result.before.medianMs / result.after.medianMs).toFixed(1));
  result.bytesRatio = Number((result.before.bytes / result.after.bytes).toFixed(1));

  // Catalog connections of routers after typical use.
  const routers = [];
  for (let i = 0; i < routerCount; i++) routers.push(await createRouter(config));
  await Promise.all(
    routers.map(async (r, i) => {
      const id = await r.insert('items', { note: `r${i}` }, { key: BigInt(i) });
      await r.get('items', id);
    }),
  );
  await client.query('BEGIN');
  await bumpMapVersion(client);
  await client.query('COMMIT');
  await new Promise((resolve) => setTimeout(resolve, 500));
  await Promise.all(routers.map((r) => r.insert('items', { note: 'after' }, { key: 1n })));
  const { rows } = await client.query(
    `SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND application_name LIKE 'shardflake%' GROUP BY 1 ORDER BY 1`,
  );
  result.routers = routerCount;
  result.backends = Object.fromEntries(rows.map((r) => [r.name, r.n]));
  await Promise.all(routers.map((r) => r.close()));
  await client.end();

  if (json) console.log(JSON.stringify(result, null, 2));
  else {
    console.log(
      `${shards} shards (init ${result.initSeconds} s), one map version changing one shard, ${rounds} rounds`,
    );
    for (const k of ['before', 'after']) {
      const r = result[k];
      console.log(
        `  ${k === 'before' ? 'whole map (before)' : 'changes   (after) '}: ${r.shardRows} shard rows, ${r.bytes} bytes, ${r.statements} statements, median ${r.medianMs} ms, p90 ${r.p90Ms} ms`,
      );
    }
    console.log(`  ratio before/after: time ${result.timeRatio}×, bytes ${result.bytesRatio}×`);
    console.log(`  ${routerCount} routers, catalog server backends: ${JSON.stringify(result.backends)}`);
  }
} finally {
  await server.stop();
}
